// Command inventory shows ten buyers racing for the last unit of an item.
//
// Each buyer sends its purchase with its own idempotency key. The purchase
// runs in one transaction through idempotency.DoTxJSON: a conditional write
// (UPDATE ... SET qty = qty - 1 WHERE qty > 0) takes the unit if one is
// left, and the answer is stored under the buyer's key in the same
// transaction. Then every buyer retries. The program prints each answer and
// the quantity left, and exits non-zero on an oversell.
//
//	go run ./examples/inventory
package main

import (
	"github.com/jobfence/jobfence/examples/inventory/shop"
	"github.com/jobfence/jobfence/examples/scenario"
)

// The scenario's code is in package shop, beside this file; `jobfence
// demo` runs the same code. Copied into your module, point the import
// above at your copy.
func main() {
	scenario.Main("inventory", scenario.Servers{Postgres: true}, shop.Run)
}
