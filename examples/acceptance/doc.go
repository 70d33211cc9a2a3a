// Package acceptance holds the end-to-end acceptance tests of the coordination plane: the seed's seven
// scenarios and the failovers (a lease holder killed in-process, killed with SIGKILL, stalled with
// SIGSTOP), run against the real stated binary, the media server simulator and the example workers
// (`go test ./examples/acceptance -run TestAcceptance`), a seeded chaos run of three transcoder
// processes under kills, stalls, intent changes and media server restarts (`-run 'TestChaos$'`; about
// 45 s, skipped with -short; CHAOS_SEED=<n> replays one), its twin for three CV worker processes
// competing for model intents on those publications (`-run TestChaosCV`; about 40 s, likewise), and
// the failover and reconcile-latency figures
// (`go test ./examples/acceptance -run '^$' -bench . -benchtime 1x`).
package acceptance
