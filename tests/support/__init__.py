"""What many tests use: stacks of product processes, waits, readers, fakes' worlds. A test module imports
from here, never from another test module."""
