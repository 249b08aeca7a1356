// Command tool is a package main.
package main

// Tool is not API.
func Tool() {}

func main() {}
