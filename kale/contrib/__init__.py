"""Features Kale ships as hooks (metrics, queue gauges, tracing), each turned
on by a setting and importing its optional library only then; and
:mod:`~kale.contrib.django`. See docs/explanation/internals-cli.md."""
