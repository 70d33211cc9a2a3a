//go:build unix

package main

import (
	"context"
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// readerGonePoll is how long one look at the output waits: the most a watch goes on after its reader
// went, and the most the look outlives the watch.
const readerGonePoll = 250 // ms

// onReaderGone calls gone, on a goroutine of its own, when out is a pipe or a socket whose reading
// end has gone (`statectl watch ... | head -1` after head exited), the way GNU tail -f notices it:
// poll asks for no event, and reports POLLERR (or POLLHUP) on such a file. It stops looking when ctx
// ends. For any other output (a terminal, a regular file, none) it does nothing.
func onReaderGone(ctx context.Context, out *os.File, gone func()) {
	if out == nil {
		return
	}
	fi, err := out.Stat()
	if err != nil || fi.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return
	}
	rc, err := out.SyscallConn()
	if err != nil {
		return
	}
	go func() {
		for ctx.Err() == nil {
			var revents int16
			var perr error
			if err := rc.Control(func(fd uintptr) {
				fds := []unix.PollFd{{Fd: int32(fd)}}
				_, perr = unix.Poll(fds, readerGonePoll)
				revents = fds[0].Revents
			}); err != nil {
				return
			}
			switch {
			case errors.Is(perr, unix.EINTR):
			case perr != nil, revents&unix.POLLNVAL != 0:
				return
			case revents&(unix.POLLERR|unix.POLLHUP) != 0:
				gone()
				return
			}
		}
	}()
}
