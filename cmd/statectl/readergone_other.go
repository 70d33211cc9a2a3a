//go:build !unix

package main

import (
	"context"
	"os"
)

// onReaderGone does nothing where poll(2) is not at hand: a watch there ends on the first write to
// its closed output.
func onReaderGone(ctx context.Context, out *os.File, gone func()) {}
