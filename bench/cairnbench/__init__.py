"""The benchmark runner behind bench/run: suites, peers, reports and charts."""
