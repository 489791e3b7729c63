"""Integration tests: Kale against real servers and libraries it talks to
(moto's SQS and S3, a throwaway PostgreSQL, Chromium) and child processes
other than `kale` itself."""
