package main

import "flag"

// flagSetOfKlog returns the Go flag set klog registered its flags (-v, ...) in.
func flagSetOfKlog() *flag.FlagSet { return flag.CommandLine }
