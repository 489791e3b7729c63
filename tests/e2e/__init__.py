"""End-to-end tests: real `kale` processes (worker, supervisor, web, sqs-local,
the demo and the benchmarks) driven as a user drives them."""
