//go:build !faults

package main

import "flag"

// faultHook registers nothing: a production build has no fault hooks (see hook_faults.go).
func faultHook(*flag.FlagSet) func() func(string) {
	return func() func(string) { return nil }
}
