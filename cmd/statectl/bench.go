package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/keeppeek/coordination/internal/bench"
	"github.com/keeppeek/coordination/store/wire"
)

func (a *app) cmdBench(ctx context.Context, cmd *command, args []string) error {
	cfg := bench.DefaultConfig()
	fs := a.flagSet(cmd.name)
	fs.IntVar(&cfg.Owners, "owners", cfg.Owners, "")
	fs.IntVar(&cfg.Rounds, "rounds", cfg.Rounds, "")
	fs.IntVar(&cfg.Writers, "writers", cfg.Writers, "")
	fs.IntVar(&cfg.Connections, "connections", cfg.Connections, "")
	fs.IntVar(&cfg.Watches, "watches", cfg.Watches, "")
	fs.IntVar(&cfg.Entries, "entries", cfg.Entries, "")
	fs.DurationVar(&cfg.Idle, "idle", cfg.Idle, "")
	fs.StringVar(&cfg.MetricsURL, "metrics-url", cfg.MetricsURL, "")
	fs.StringVar(&cfg.Namespace, "namespace", cfg.Namespace, "")
	fs.BoolVar(&cfg.Keep, "keep", false, "")
	admins := fs.String("admins", "", "")
	adminsFile := fs.String("admins-file", "", "")
	if _, err := a.parse(cmd, fs, args, 0, 0); err != nil {
		return err
	}
	cfg.URL, cfg.Prefix, cfg.RequestTimeout = a.g.natsURL, a.g.prefix, a.g.timeout
	cfg.Principals = []bench.Principal{{ID: a.g.user, Password: a.g.password}}
	tlsOpt, err := a.g.tlsOption()
	if err != nil {
		return err
	}
	if tlsOpt != nil {
		cfg.NATSOptions = append(cfg.NATSOptions, tlsOpt)
	}
	if a.g.nkey != "" {
		if *admins != "" || *adminsFile != "" {
			return usageErrorf("--nkey authenticates --user, and --admins names the principals the bench connects as, by password: give one")
		}
		o, err := nats.NkeyOptionFromSeed(a.g.nkey)
		if err != nil {
			return usageErrorf("--nkey %s: %v", a.g.nkey, err)
		}
		cfg.NATSOptions = append(cfg.NATSOptions, o)
		cfg.Principals[0].Password = ""
	}
	if *adminsFile != "" {
		if *admins != "" {
			return usageErrorf("--admins and --admins-file are two ways to name the admins: give one")
		}
		list, err := readAdmins(*adminsFile)
		if err != nil {
			return err
		}
		*admins = list
	}
	if *admins != "" {
		ps, err := parseAdmins(*admins)
		if err != nil {
			return err
		}
		cfg.Principals = ps
	}
	if err := cfg.Validate(); err != nil {
		return usageErrorf("%v", err)
	}
	cfg.Logf = func(format string, args ...any) { fmt.Fprintf(a.stderr, "statectl bench: "+format+"\n", args...) }
	if !cfg.Keep {
		a.setLeftBehind(fmt.Sprintf("the bench's keys in %s (under cas/, writers/, fanout/ and rss/) may be left behind; the next statectl bench on %s removes them", cfg.Namespace, cfg.Namespace))
	}
	rep, err := bench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	if a.g.json {
		return writeJSON(a.stdout, rep)
	}
	return rep.WriteTable(a.stdout)
}

// readAdmins reads the file of --admins-file: ID:PASSWORD items, one or more per line (comma-separated),
// blank lines and lines starting with # skipped. It returns them as one --admins list.
func readAdmins(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", usageErrorf("--admins-file %s: %v", path, err)
	}
	var items []string
	for line := range strings.Lines(string(b)) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			items = append(items, strings.Trim(line, ","))
		}
	}
	if len(items) == 0 {
		return "", usageErrorf("--admins-file %s: no principal in it (want ID:PASSWORD, one or more per line)", path)
	}
	return strings.Join(items, ","), nil
}

// parseAdmins reads ID:PASSWORD,ID:PASSWORD,... (an ID alone connects without credentials).
func parseAdmins(s string) ([]bench.Principal, error) {
	var ps []bench.Principal
	for item := range strings.SplitSeq(s, ",") {
		id, pw, _ := strings.Cut(strings.TrimSpace(item), ":")
		if !wire.ValidPrincipalID(id) {
			return nil, usageErrorf("--admins: %q is not a principal id", id)
		}
		ps = append(ps, bench.Principal{ID: id, Password: pw})
	}
	return ps, nil
}
