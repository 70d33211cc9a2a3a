package stated

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natstest"
)

const permTimeout = 10 * time.Second

// permProbe checks, on a running NATS server, where a connection may publish and subscribe, by
// watching what an unrestricted observer connection sees: every check ends with a marker message on
// a subject both may use, so "nothing arrived" is known without waiting for a timeout.
type permProbe struct {
	t        *testing.T
	url      string
	observer *nats.Conn
	seq      int
}

func newPermProbe(t *testing.T, url string, observer nats.Option) *permProbe {
	t.Helper()
	oc, err := nats.Connect(url, observer)
	if err != nil {
		t.Fatalf("observer: %v", err)
	}
	t.Cleanup(oc.Close)
	return &permProbe{t: t, url: url, observer: oc}
}

// canPublish reports whether nc's publication on subject reaches a subscriber. marker is a subject nc
// may publish on.
func (p *permProbe) canPublish(nc *nats.Conn, subject, marker string) bool {
	p.t.Helper()
	ch := make(chan *nats.Msg, 4)
	s1, err := p.observer.ChanSubscribe(subject, ch)
	if err != nil {
		p.t.Fatal(err)
	}
	defer func() { _ = s1.Unsubscribe() }()
	s2, err := p.observer.ChanSubscribe(marker, ch)
	if err != nil {
		p.t.Fatal(err)
	}
	defer func() { _ = s2.Unsubscribe() }()
	if err := p.observer.Flush(); err != nil {
		p.t.Fatal(err)
	}
	p.seq++
	body := fmt.Sprintf("probe-%d", p.seq)
	if err := nc.Publish(subject, []byte(body)); err != nil {
		p.t.Fatal(err)
	}
	if err := nc.Publish(marker, []byte("marker-"+body)); err != nil {
		p.t.Fatal(err)
	}
	for {
		select {
		case m := <-ch:
			switch string(m.Data) {
			case body:
				return true
			case "marker-" + body:
				return false
			}
		case <-time.After(permTimeout):
			p.t.Fatalf("publish %s: the marker on %s never arrived", subject, marker)
			return false
		}
	}
}

// canSubscribe reports whether nc's subscription to subject receives a message published on
// publishOn (a subject the subscription matches). marker is a subject nc may subscribe to.
func (p *permProbe) canSubscribe(nc *nats.Conn, subject, publishOn, marker string) bool {
	p.t.Helper()
	ch := make(chan *nats.Msg, 4)
	s1, err := nc.ChanSubscribe(subject, ch)
	if err != nil {
		p.t.Fatal(err)
	}
	defer func() { _ = s1.Unsubscribe() }()
	s2, err := nc.ChanSubscribe(marker, ch)
	if err != nil {
		p.t.Fatal(err)
	}
	defer func() { _ = s2.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		p.t.Fatal(err)
	}
	p.seq++
	body := fmt.Sprintf("probe-%d", p.seq)
	if err := p.observer.Publish(publishOn, []byte(body)); err != nil {
		p.t.Fatal(err)
	}
	if err := p.observer.Publish(marker, []byte("marker-"+body)); err != nil {
		p.t.Fatal(err)
	}
	for {
		select {
		case m := <-ch:
			switch string(m.Data) {
			case body:
				return true
			case "marker-" + body:
				return false
			}
		case <-time.After(permTimeout):
			p.t.Fatalf("subscribe %s: the marker on %s never arrived", subject, marker)
			return false
		}
	}
}

// canRespond reports whether nc, subscribed to requestSubject, can answer a request sent there by
// requester with reply subject inbox.
func (p *permProbe) canRespond(nc, requester *nats.Conn, requestSubject, inbox string) bool {
	p.t.Helper()
	reqs, err := nc.SubscribeSync(requestSubject)
	if err != nil {
		p.t.Fatal(err)
	}
	defer func() { _ = reqs.Unsubscribe() }()
	if err := nc.Flush(); err != nil {
		p.t.Fatal(err)
	}
	replies, err := requester.SubscribeSync(inbox)
	if err != nil {
		p.t.Fatal(err)
	}
	defer func() { _ = replies.Unsubscribe() }()
	if err := requester.Flush(); err != nil {
		p.t.Fatal(err)
	}
	if err := requester.PublishRequest(requestSubject, inbox, []byte("req")); err != nil {
		p.t.Fatal(err)
	}
	m, err := reqs.NextMsg(permTimeout)
	if err != nil {
		p.t.Fatalf("request on %s not received: %v", requestSubject, err)
	}
	if err := m.Respond([]byte("answer")); err != nil {
		p.t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		p.t.Fatal(err)
	}
	// A marker from the observer follows on the same inbox: the answer, if it passed, is first.
	if err := p.observer.Publish(inbox, []byte("marker")); err != nil {
		p.t.Fatal(err)
	}
	r, err := replies.NextMsg(permTimeout)
	if err != nil {
		p.t.Fatalf("no marker on %s: %v", inbox, err)
	}
	return string(r.Data) == "answer"
}

type permCase struct {
	subject string
	want    bool
}

// checkPrincipalPermissions runs SPEC section 9's matrix for principal p (of prefix kp) connected as
// nc; other is another principal's id.
func checkPrincipalPermissions(t *testing.T, probe *permProbe, nc *nats.Conn, p PrincipalConfig, other string) {
	t.Helper()
	id := p.ID
	own := "kp.state.v1." + id + ".get" // a subject every principal may publish on
	pubs := []permCase{
		{"kp.state.v1." + id + ".get", true},
		{"kp.state.v1." + id + ".watch", true},
		{"kp.heartbeat.v1." + id + ".w1", true},
		{"kp.media.v1." + id + ".subscribe", true},
		{"kp.caps.v1.get", true},
		{"kp.state.v1." + other + ".get", false},
		{"kp.heartbeat.v1." + other + ".w1", false},
		{"kp.media.v1." + other + ".subscribe", false},
		{"kp.admin.v1." + other + ".backup", false},
		{"kp.watch.v1." + id + ".w", false}, // only the server delivers watch updates
		{"kp.watch.v1." + other + ".w", false},
		{"_INBOX." + other + ".x", p.Media}, // the media server answers into inboxes
		{"_INBOX." + id + ".x", p.Media},
		{"kp.state.v1." + id, false},
		{"kp.state.v2." + id + ".get", false},
		{"other.subject", false},
		{"$SRV.PING", p.Admin},
		{"$SRV.INFO.keeppeek-state", p.Admin},
		{"kp.admin.v1." + id + ".backup", p.Admin},
		{"kp.caps.v1.changed", p.Media},
	}
	for _, c := range pubs {
		if got := probe.canPublish(nc, c.subject, own); got != c.want {
			t.Errorf("%s publish %s: allowed %v, want %v", id, c.subject, got, c.want)
		}
	}
	marker := "_INBOX." + id + ".marker"
	subs := []struct {
		subject, on string
		want        bool
	}{
		{"kp.watch.v1." + id + ".w", "kp.watch.v1." + id + ".w", true},
		{"kp.watch.v1." + id + ".>", "kp.watch.v1." + id + ".w2", true},
		{"_INBOX." + id + ".abc", "_INBOX." + id + ".abc", true},
		{"_INBOX." + id + ".*.*", "_INBOX." + id + ".a.b", true},
		{"kp.caps.v1.changed", "kp.caps.v1.changed", true},
		{"kp.watch.v1." + other + ".w", "kp.watch.v1." + other + ".w", false},
		{"kp.watch.v1.*.w", "kp.watch.v1." + other + ".w", false},
		{"_INBOX." + other + ".abc", "_INBOX." + other + ".abc", false},
		{"_INBOX.>", "_INBOX." + other + ".abc", false},
		{"_INBOX.abc", "_INBOX.abc", false},
		{">", "kp.watch.v1." + other + ".w", false},
		{"kp.>", "kp.state.v1." + other + ".get", false},
		{"kp.state.v1." + id + ".get", "kp.state.v1." + id + ".get", false},
		{"kp.state.v1.*.get", "kp.state.v1." + other + ".get", false},
		{"kp.heartbeat.v1." + id + ".w1", "kp.heartbeat.v1." + id + ".w1", false},
		{"kp.admin.v1." + id + ".backup", "kp.admin.v1." + id + ".backup", false},
		{"$SRV.>", "$SRV.PING", false},
		{"kp.caps.v1.get", "kp.caps.v1.get", p.Media},
		{"kp.media.v1." + other + ".subscribe", "kp.media.v1." + other + ".subscribe", p.Media},
		{"kp.media.v1.*.>", "kp.media.v1." + other + ".start_publication", p.Media},
		{"kp.media.v1." + id + ".subscribe", "kp.media.v1." + id + ".subscribe", p.Media},
	}
	for _, c := range subs {
		if got := probe.canSubscribe(nc, c.subject, c.on, marker); got != c.want {
			t.Errorf("%s subscribe %s: allowed %v, want %v", id, c.subject, got, c.want)
		}
	}
}

// matrixPrincipals are one principal of each kind: plain (password), admin (bcrypt hash), media
// (nkey), and an admin media server (password).
func matrixPrincipals(t *testing.T) ([]PrincipalConfig, map[string]nats.Option) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	hash, err := bcrypt.GenerateFromPassword([]byte("admin-pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	adminHash := string(hash)
	ps := []PrincipalConfig{
		{ID: "alice", Password: "alice-pw"},
		{ID: "ops", Admin: true, Password: adminHash},
		{ID: "media", Media: true, Nkey: pub},
		{ID: "mediadmin", Media: true, Admin: true, Password: "md-pw"},
	}
	nkeyOpt, err := nats.NkeyOptionFromSeed(writeSeed(t, seed))
	if err != nil {
		t.Fatal(err)
	}
	return ps, map[string]nats.Option{
		"alice":     nats.UserInfo("alice", "alice-pw"),
		"ops":       nats.UserInfo("ops", "admin-pw"),
		"media":     nkeyOpt,
		"mediadmin": nats.UserInfo("mediadmin", "md-pw"),
	}
}

func writeSeed(t *testing.T, seed []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(p, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func runMatrix(t *testing.T, url string, observer nats.Option, ps []PrincipalConfig, creds map[string]nats.Option) {
	t.Helper()
	probe := newPermProbe(t, url, observer)
	for _, p := range ps {
		t.Run(p.ID, func(t *testing.T) {
			probe.t = t
			nc, err := nats.Connect(url, creds[p.ID])
			if err != nil {
				t.Fatalf("connect %s: %v", p.ID, err)
			}
			defer nc.Close()
			checkPrincipalPermissions(t, probe, nc, p, "bob")
			if p.Media {
				// The media server answers requests, into the requester's inbox.
				bob, err := nats.Connect(url, observer)
				if err != nil {
					t.Fatal(err)
				}
				defer bob.Close()
				if !probe.canRespond(nc, bob, "kp.media.v1.bob.subscribe", "_INBOX.bob.r1") {
					t.Errorf("%s cannot answer a media command", p.ID)
				}
				if !probe.canRespond(nc, bob, "kp.caps.v1.get", "_INBOX.bob.r2") {
					t.Errorf("%s cannot answer kp.caps.v1.get", p.ID)
				}
			}
		})
	}
}

// The embedded server installs, for each principal, SPEC section 9's permissions: publish under its own
// tokens (and the capability request), subscribe to its own watch subjects, its own inbox and the
// capability changes; admins also publish on $SRV.> and their admin subjects; the media principal also
// takes capability and media requests and answers them into the requesters' inboxes.
func TestEmbeddedPermissionMatrix(t *testing.T) {
	ps, creds := matrixPrincipals(t)
	cfg := DefaultConfig()
	cfg.Principals = ps
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ns := natstest.Start(t, natsserver.Options{Users: natsUsers(cfg, "internal-pw")})
	runMatrix(t, ns.ClientURL(), nats.UserInfo(internalUser, "internal-pw"), ps, creds)
}

// `stated nats-permissions` prints a configuration that nats-server reads, and the server it
// configures enforces the same matrix as the embedded one.
func TestPrintedPermissionsMatrix(t *testing.T) {
	ps, creds := matrixPrincipals(t)
	cfg := DefaultConfig()
	cfg.Principals = ps
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	out := PermissionsConfig(cfg)
	file := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(file, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(file)
	if err != nil {
		t.Fatalf("nats-server rejects:\n%s\n%v", out, err)
	}
	opts.Host, opts.Port, opts.NoLog, opts.NoSigs = "127.0.0.1", server.RANDOM_PORT, true, true
	opts.Users = append(opts.Users, &server.User{Username: internalUser, Password: "internal-pw"})
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(permTimeout) {
		t.Fatal("not ready")
	}
	if !strings.Contains(out, "no_fast_producer_stall") {
		t.Fatal("no no_fast_producer_stall")
	}
	runMatrix(t, ns.ClientURL(), nats.UserInfo(internalUser, "internal-pw"), ps, creds)
}
