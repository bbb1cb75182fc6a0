"""Property tests: bad input gets a clear error naming the field and the value; nothing is lost."""
