package capabilities

// SetFetchHook makes t call f after every capability fetch with the fetched generation (0 on error)
// and the error. Set it before Start.
func SetFetchHook(t *Tracker, f func(gen uint64, err error)) { t.onFetch = f }
