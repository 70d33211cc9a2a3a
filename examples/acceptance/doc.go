// Package acceptance holds the end-to-end acceptance tests of the coordination plane: the seed's seven
// scenarios and the failovers (a lease holder killed in-process, killed with SIGKILL, stalled with
// SIGSTOP), run against the real stated binary, the media server simulator and the example workers
// (`go test ./examples/acceptance -run TestAcceptance`), and the failover and reconcile-latency figures
// (`go test ./examples/acceptance -run '^$' -bench . -benchtime 1x`).
package acceptance
