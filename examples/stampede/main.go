// Command stampede shows a cold cache key read by 1,000 concurrent callers,
// spread over 4 service instances, being computed once. It needs nothing set
// up: without REDIS_URL it starts a throwaway redis-server.
//
//	go run ./examples/stampede
package main

import (
	"github.com/jobfence/jobfence/examples/scenario"
	"github.com/jobfence/jobfence/examples/stampede/hotkey"
)

// The scenario's code is in package hotkey, beside this file; `jobfence
// demo` runs the same code. Copied into your module, point the import
// above at your copy.
func main() {
	scenario.Main("stampede", scenario.Servers{Redis: true}, hotkey.Run)
}
