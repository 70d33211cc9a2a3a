package internal

import (
	"flag"
	"io"
	"testing"
)

// KP_PASSWORD goes with the environment's user only: --password wins, and a --user naming another
// principal gets no password rather than the environment user's secret.
func TestPasswordBelongsToTheEnvironmentsUser(t *testing.T) {
	t.Setenv("KP_USER", "alice")
	t.Setenv("KP_PASSWORD", "alice-secret")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "alice-secret"},
		{[]string{"--user", "alice"}, "alice-secret"},
		{[]string{"--user", "bob"}, ""},
		{[]string{"--user", "bob", "--password", "bob-secret"}, "bob-secret"},
		{[]string{"--password", "other"}, "other"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		conn := ConnFlagsOn(fs, "dev")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got := conn.password(); got != c.want {
			t.Errorf("%v: password %q, want %q", c.args, got, c.want)
		}
	}
	// Without KP_USER, KP_PASSWORD is the default user's.
	t.Setenv("KP_USER", "")
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	conn := ConnFlagsOn(fs, "dev")
	if err := fs.Parse([]string{"--user", "dev"}); err != nil {
		t.Fatal(err)
	}
	if got := conn.password(); got != "alice-secret" {
		t.Errorf("default user: password %q", got)
	}
}
