package m

// WindowsOnly is in a file for another platform.
func WindowsOnly() {}
