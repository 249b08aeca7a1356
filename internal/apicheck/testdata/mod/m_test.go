package m

// TestHelper is in a test file.
func TestHelper() {}
