"""What many tests use and no benchmark does: module fixtures that start product processes, readers,
fakes' worlds. A test module imports from here or from testkit/ (what tests and benchmarks share),
never from another test module."""
