package capabilities

import "time"

// SetFetchHook makes t call f after every capability fetch with the fetched generation (0 on error)
// and the error. Set it before Start.
func SetFetchHook(t *Tracker, f func(gen uint64, err error)) { t.onFetch = f }

// SetLateAnswerWait makes c follow a command it gave up on for d instead of LateAnswerWait. Set it
// before the first command.
func SetLateAnswerWait(c *Commands, d time.Duration) { c.lateWait = d }
