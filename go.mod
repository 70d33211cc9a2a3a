module github.com/keeppeek/coordination

go 1.26.0

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/google/btree v1.1.3
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	go.etcd.io/bbolt v1.5.0
	go.uber.org/goleak v1.3.0
)

require (
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.45.0 // indirect
	golang.org/x/text v0.14.0 // indirect
)
