// Package stated is the stated server process: configuration (SPEC section 14), the embedded or
// external NATS server with per-principal authorization, the store engine, the state server, HTTP
// health and metrics, reload on SIGHUP and a graceful stop on SIGTERM. cmd/stated is its thin main.
package stated

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"github.com/nats-io/nkeys"
	"golang.org/x/crypto/bcrypt"

	"github.com/keeppeek/coordination/internal/natsserver"
	"github.com/keeppeek/coordination/internal/natsurl"
	"github.com/keeppeek/coordination/internal/settingsfile"
	"github.com/keeppeek/coordination/store/policy"
	"github.com/keeppeek/coordination/store/server"
	"github.com/keeppeek/coordination/store/wire"
)

// Config is stated's configuration file (TOML); every key is optional.
type Config struct {
	DataDir       string            `toml:"data_dir"`
	SubjectPrefix string            `toml:"subject_prefix"`
	HTTPListen    string            `toml:"http_listen"`
	NATS          NATSConfig        `toml:"nats"`
	Principals    []PrincipalConfig `toml:"principals"`
	Bounds        map[string]int64  `toml:"bounds"`
	StateStore    struct {
		Settings map[string]any `toml:"settings"`
	} `toml:"state_store"`

	path     string   // the file it was read from, "" for defaults
	restArgs []string // positional arguments after the flags
	// file is what the file said of the settings that only a restart applies, as read (before the
	// command line's overrides): a reload compares the file's new values with these.
	file restartSettings
	// natsURLFlag is --nats-url ("" when not given): it overrides the file's [nats] at every reading,
	// reloads included.
	natsURLFlag string
	// dataDirFlag is --data-dir ("" when not given): it overrides the file's data_dir.
	dataDirFlag string
}

// overriddenBy names the command-line flag that overrides key of the file ("" when none does): a
// change of that key in the file takes no effect at a restart with the same command line either.
func (c *Config) overriddenBy(key string) string {
	switch {
	case key == "data_dir" && c.dataDirFlag != "":
		return "--data-dir"
	case (key == "nats.url" || key == "nats.listen") && c.natsURLFlag != "":
		return "--nats-url"
	}
	return ""
}

// restartSettings are the settings of the file that a SIGHUP does not apply (principals are
// reloaded; subject_prefix and bounds have their own messages).
type restartSettings struct {
	DataDir    string
	HTTPListen string
	NATS       NATSConfig
	Settings   string // the settings-backed namespaces, sorted, comma-separated
}

func (c *Config) restartSettings() restartSettings {
	names := make([]string, 0, len(c.StateStore.Settings))
	for ns := range c.StateStore.Settings {
		names = append(names, ns)
	}
	sort.Strings(names)
	return restartSettings{DataDir: c.DataDir, HTTPListen: c.HTTPListen, NATS: c.NATS, Settings: strings.Join(names, ", ")}
}

// changedOnRestart names the settings that differ between two readings of the file.
func (r restartSettings) changedOnRestart(next restartSettings) []string {
	var out []string
	for _, d := range []struct {
		name      string
		was, will any
	}{
		{"data_dir", r.DataDir, next.DataDir},
		{"http_listen", r.HTTPListen, next.HTTPListen},
		{"nats.listen", r.NATS.Listen, next.NATS.Listen},
		{"nats.url", r.NATS.URL, next.NATS.URL},
		{"nats.user", r.NATS.User, next.NATS.User},
		{"nats.password", r.NATS.Password, next.NATS.Password},
		{"nats.creds", r.NATS.Creds, next.NATS.Creds},
		{"nats.tls_ca", r.NATS.TLSCA, next.NATS.TLSCA},
		{"nats.tls_cert", r.NATS.TLSCert, next.NATS.TLSCert},
		{"nats.tls_key", r.NATS.TLSKey, next.NATS.TLSKey},
		{"nats.listen_tls_cert", r.NATS.ListenTLSCert, next.NATS.ListenTLSCert},
		{"nats.listen_tls_key", r.NATS.ListenTLSKey, next.NATS.ListenTLSKey},
		{"nats.listen_tls_client_ca", r.NATS.ListenTLSClientCA, next.NATS.ListenTLSClientCA},
		{"nats.watch_sweep_ms", r.NATS.WatchSweepMs, next.NATS.WatchSweepMs},
		{"nats.watch_idle_ms", r.NATS.WatchIdleMs, next.NATS.WatchIdleMs},
		{"the settings-backed namespaces ([state_store.settings])", r.Settings, next.Settings},
	} {
		if d.was != d.will {
			out = append(out, d.name)
		}
	}
	return out
}

// Ineffective names the keys set in the configuration that have no effect in the mode it chooses
// (the embedded NATS server or an external one), with why, so that stated can say so at start: an
// operator who set [nats] user and password for the embedded server believes it asks for them.
func (c *Config) Ineffective() []string {
	var out []string
	n := c.NATS
	if n.URL == "" {
		if set := keysSet("nats.user", n.User, "nats.password", n.Password, "nats.creds", n.Creds); len(set) > 0 {
			out = append(out, strings.Join(set, ", ")+" ignored: they are stated's own credentials on an external NATS server (url); "+
				"the embedded server does not ask for them, principals log in as [[principals]] say")
		}
		return out
	}
	if set := c.listenTLSKeysSet(); len(set) > 0 {
		out = append(out, strings.Join(set, ", ")+" ignored: they are the embedded NATS server's TLS (listen); stated uses an external "+
			"server (url), whose TLS its operator configures (tls_ca, tls_cert and tls_key are stated's TLS to it)")
	}
	if n.WatchSweepMs != 0 {
		out = append(out, "nats.watch_sweep_ms ignored: only with the embedded server can stated see that a watch's subscriber is gone "+
			"(nats.watch_idle_ms bounds how long a watch may go unnamed by its client instead)")
	}
	if n.Password != "" && n.User == "" {
		out = append(out, "nats.password ignored: it is sent only with nats.user")
	}
	if n.Creds != "" && n.User != "" {
		out = append(out, "nats.user and nats.creds both set: a NATS server authenticates with one of them "+
			"(the credentials in operator mode, user and password otherwise) and ignores the other")
	}
	return out
}

// NATSConfig chooses the embedded server (Listen) or an external one (URL). User, Password and
// Creds are stated's own credentials on an external server; TLSCA, TLSCert and TLSKey its TLS to
// it (refused with the embedded server: see checkTLSMode); ListenTLSCert, ListenTLSKey and
// ListenTLSClientCA the TLS the embedded server serves.
type NATSConfig struct {
	Listen   string `toml:"listen"`
	URL      string `toml:"url"`
	User     string `toml:"user"`
	Password string `toml:"password"`
	Creds    string `toml:"creds"`
	// TLSCA is a PEM bundle of the CA certificates that verify the external server's certificate
	// (instead of the system's roots). TLSCert and TLSKey, both or neither, are stated's client
	// certificate (PEM, its chain may follow) and its private key (PEM), for a server that verifies
	// clients (mutual TLS). Any of them makes the connection TLS, with a nats:// URL too.
	TLSCA   string `toml:"tls_ca"`
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// ListenTLSCert and ListenTLSKey, both or neither, make the embedded server serve TLS with this
	// certificate (PEM, its chain may follow) and private key (PEM): every client must then connect
	// over TLS (stated's own, in-process connection excepted). ListenTLSClientCA, with them, is a PEM
	// bundle of the CAs whose client certificates the server accepts: a client without one is refused
	// (mutual TLS). The files are read again at every client's handshake, so a certificate renewed in
	// place is served from the next connection on. Ignored with an external server.
	ListenTLSCert     string `toml:"listen_tls_cert"`
	ListenTLSKey      string `toml:"listen_tls_key"`
	ListenTLSClientCA string `toml:"listen_tls_client_ca"`
	// WatchSweepMs is how often, with the embedded server, stated looks for watches whose subscriber
	// is gone (a watch with none at two looks running is dropped, freeing its slot). 0: 15,000.
	WatchSweepMs int64 `toml:"watch_sweep_ms"`
	// WatchIdleMs, when set (1,000 to 86,400,000), has stated close with ACK_TIMEOUT a watch whose
	// client sent no request naming it (an ack, of any sequence) for that long: see
	// server.Options.IdleWatch. It applies with either NATS server, and is for an external one,
	// where the sweep cannot see that a watch's subscriber is gone. 0: off.
	WatchIdleMs int64 `toml:"watch_idle_ms"`
}

// PrincipalConfig is one principal and its NATS user: authenticated by Password (plain text or a
// bcrypt hash) or by Nkey (a user public key, "U..."). Media marks the media server's principal: it
// may answer capability and media command requests.
type PrincipalConfig struct {
	ID       string `toml:"id"`
	Admin    bool   `toml:"admin"`
	Password string `toml:"password"`
	Nkey     string `toml:"nkey"`
	Media    bool   `toml:"media"`
}

// Defaults of SPEC section 14.
const (
	DefaultDataDir    = "./data"
	DefaultHTTPListen = "127.0.0.1:9095"
	DefaultNATSListen = "127.0.0.1:4222"
	DevPrincipal      = "dev"
	DatabaseFile      = "state-store.db"
)

// DefaultConfig is the configuration with no file.
func DefaultConfig() *Config {
	return &Config{DataDir: DefaultDataDir, SubjectPrefix: wire.DefaultPrefix, HTTPListen: DefaultHTTPListen,
		NATS: NATSConfig{Listen: DefaultNATSListen}}
}

// tomlError is an error of the TOML decoder, with the text of a password kept out of it: the error
// goes to the terminal or the log, and the decoder quotes what it found where a value should be (a
// password written without its quotes: password = s3cret).
func tomlError(err error) error {
	var pe toml.ParseError
	if !errors.As(err, &pe) {
		return err
	}
	key := pe.LastKey
	if i := strings.LastIndexByte(key, '.'); i >= 0 {
		key = key[i+1:]
	}
	if key != "password" {
		return err
	}
	return fmt.Errorf("toml: line %d (last key %q): not a valid TOML value (a password is a string, in quotes); its text is not shown", pe.Position.Line, pe.LastKey)
}

// LoadConfig reads and validates a configuration file. Unknown keys are errors; keys are
// case-sensitive, so DATA_DIR or a principal's Admin is unknown (see exactKey).
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	// A first, untyped pass checks the shape of the keys that must hold tables: decoding into the
	// typed Config would drop a scalar given for a map (bounds = 5) without an error.
	var raw map[string]any
	if _, err := toml.Decode(string(data), &raw); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, tomlError(err))
	}
	if err := checkShape(raw); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	c := DefaultConfig()
	md, err := toml.Decode(string(data), c)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, tomlError(err))
	}
	var unknown []string
	for _, k := range md.Undecoded() {
		if len(k) >= 3 && k[0] == "state_store" && k[1] == "settings" {
			continue // settings-backed namespaces hold arbitrary entries
		}
		unknown = append(unknown, k.String())
	}
	for _, k := range md.Keys() {
		if !exactKey(reflect.TypeFor[Config](), k) && !slices.Contains(unknown, k.String()) {
			unknown = append(unknown, k.String())
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("config %s: unknown keys: %s", path, strings.Join(unknown, ", "))
	}
	if c.NATS.URL != "" && !md.IsDefined("nats", "listen") {
		c.NATS.Listen = ""
	}
	c.path = path
	c.file = c.restartSettings()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// exactKey reports whether key names, letter for letter, a field of t (through its tables, arrays of
// tables and maps), or lies under a map, whose keys are the file's own. The TOML decoder matches a key
// to a field without regard to case when no field has its exact name, and does not count it
// undecoded: DATA_DIR would set data_dir, and "Admin = true" beside "admin = false" (two keys to TOML)
// would make a principal an admin. TOML keys are case-sensitive: such a key is unknown.
func exactKey(t reflect.Type, key toml.Key) bool {
	for _, name := range key {
		for t.Kind() == reflect.Slice || t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := fieldByTag(t, name)
			if !ok {
				return false
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return true // under an arbitrary value (a settings entry): the key is the file's own
		}
	}
	return true
}

// fieldByTag returns the exported field of struct type t whose toml tag is name.
func fieldByTag(t reflect.Type, name string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if tag, _, _ := strings.Cut(f.Tag.Get("toml"), ","); f.IsExported() && tag == name {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

// checkShape reports a key that must hold a table (nats, bounds, state_store,
// state_store.settings) or an array of tables (principals) but holds another TOML type.
func checkShape(raw map[string]any) error {
	for _, key := range []string{"nats", "bounds", "state_store"} {
		if v, ok := raw[key]; ok {
			if _, isTable := v.(map[string]any); !isTable {
				return fmt.Errorf("%s: expected a table, found %s", key, settingsfile.TypeName(v))
			}
		}
	}
	if ss, ok := raw["state_store"].(map[string]any); ok {
		if v, ok := ss["settings"]; ok {
			settings, isTable := v.(map[string]any)
			if !isTable {
				return fmt.Errorf("state_store.settings: expected a table, found %s", settingsfile.TypeName(v))
			}
			for ns, e := range settings {
				if _, isTable := e.(map[string]any); !isTable {
					return fmt.Errorf("state_store.settings.%q: expected a table, found %s", ns, settingsfile.TypeName(e))
				}
			}
		}
	}
	if v, ok := raw["principals"]; ok {
		switch v := v.(type) {
		case []map[string]any: // [[principals]]
		case []any: // principals = [{...}, ...]
			for i, e := range v {
				if _, isTable := e.(map[string]any); !isTable {
					return fmt.Errorf("principals: expected an array of tables, found %s at index %d", settingsfile.TypeName(e), i)
				}
			}
		default:
			return fmt.Errorf("principals: expected an array of tables, found %s", settingsfile.TypeName(v))
		}
	}
	return nil
}

// Path is the file the configuration was read from ("" for defaults).
func (c *Config) Path() string { return c.path }

// Validate checks the configuration.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return fmt.Errorf("data_dir is empty")
	}
	if !wire.ValidPrefix(c.SubjectPrefix) {
		return fmt.Errorf("subject_prefix %q is not a valid subject prefix", c.SubjectPrefix)
	}
	if err := checkPrefixSpace(c.SubjectPrefix); err != nil {
		return fmt.Errorf("subject_prefix %q: %w", c.SubjectPrefix, err)
	}
	if c.NATS.URL != "" && c.NATS.Listen != "" {
		return fmt.Errorf("nats: set either listen (embedded server) or url (external server), not both")
	}
	if c.NATS.URL == "" && c.NATS.Listen == "" {
		return fmt.Errorf("nats: set listen or url")
	}
	if c.NATS.URL != "" {
		if err := natsurl.Check(c.NATS.URL); err != nil {
			// Redacted: the URL may carry a login, and this error goes to the log.
			return fmt.Errorf("nats: url %q: %w", natsurl.Redact(c.NATS.URL), err)
		}
	}
	if (c.NATS.TLSCert == "") != (c.NATS.TLSKey == "") {
		return fmt.Errorf("nats: tls_cert and tls_key go together: set both (the client certificate and its private key) or neither")
	}
	if (c.NATS.ListenTLSCert == "") != (c.NATS.ListenTLSKey == "") {
		return fmt.Errorf("nats: listen_tls_cert and listen_tls_key go together: set both (the embedded server's certificate and its private key) or neither")
	}
	if c.NATS.ListenTLSClientCA != "" && c.NATS.ListenTLSCert == "" {
		return fmt.Errorf("nats: listen_tls_client_ca needs listen_tls_cert and listen_tls_key: the embedded server verifies client certificates only over TLS")
	}
	if err := checkListen(c.HTTPListen); err != nil {
		return fmt.Errorf("http_listen: %w", err)
	}
	if c.NATS.Listen != "" {
		if err := checkListen(c.NATS.Listen); err != nil {
			return fmt.Errorf("nats: listen: %w", err)
		}
	}
	if c.NATS.WatchSweepMs != 0 && (c.NATS.WatchSweepMs < 10 || c.NATS.WatchSweepMs > maxWatchSweepMs) {
		// The upper bound keeps the interval a time.Duration: a larger count of milliseconds would
		// wrap around to a negative interval, or to one of a fraction of a millisecond.
		return fmt.Errorf("nats: watch_sweep_ms must be from 10 to %d, got %d", maxWatchSweepMs, c.NATS.WatchSweepMs)
	}
	if c.NATS.WatchIdleMs != 0 && (c.NATS.WatchIdleMs < minWatchIdleMs || c.NATS.WatchIdleMs > maxWatchIdleMs) {
		// Below a second, a client would have to name its watch more often than any does; the upper
		// bound keeps the duration a time.Duration, as for watch_sweep_ms.
		return fmt.Errorf("nats: watch_idle_ms must be 0 (off) or from %d to %d, got %d", minWatchIdleMs, maxWatchIdleMs, c.NATS.WatchIdleMs)
	}
	seen := map[string]bool{}
	nkeyOwner := map[string]string{} // NATS keys nkey users by their key: one key is one user
	for _, p := range c.Principals {
		if !wire.ValidPrincipalID(p.ID) {
			return fmt.Errorf("principal %q: invalid id", p.ID)
		}
		if seen[p.ID] {
			return fmt.Errorf("principal %q is configured twice", p.ID)
		}
		seen[p.ID] = true
		if (p.Password == "") == (p.Nkey == "") {
			return fmt.Errorf("principal %q: set exactly one of password and nkey", p.ID)
		}
		if err := checkBcrypt(p.Password); err != nil {
			return fmt.Errorf("principal %q: %w", p.ID, err)
		}
		if p.Nkey != "" && !nkeys.IsValidPublicUserKey(p.Nkey) {
			return fmt.Errorf("principal %q: nkey must be a user public key (U..., as `nsc` or `nk -gen user -pubout` print it)", p.ID)
		}
		if other, dup := nkeyOwner[p.Nkey]; dup && p.Nkey != "" {
			return fmt.Errorf("principals %q and %q have the same nkey: give each its own", other, p.ID)
		}
		nkeyOwner[p.Nkey] = p.ID
	}
	if _, err := c.BoundsValue(); err != nil {
		return err
	}
	for ns := range c.StateStore.Settings {
		if !wire.ValidNamespace(ns) || ns == string(wire.KindSystem) {
			return fmt.Errorf("state_store.settings: %q is not a namespace that can be settings-backed", ns)
		}
	}
	return nil
}

// checkEmbeddedPayload refuses, with the embedded NATS server, bounds whose messages its max_payload
// could not carry (server.CheckPayload). The server refuses them too, but only once it is connected:
// after the store was opened and NATS started, and as a runtime failure (exit code 1) rather than a
// configuration error naming the file. An external server's max_payload is known only once
// connected: there the server's own check is the one.
func (c *Config) checkEmbeddedPayload() error {
	if c.NATS.URL != "" {
		return nil
	}
	b, err := c.BoundsValue()
	if err != nil {
		return err
	}
	return server.CheckPayload(b, natsserver.MaxPayload)
}

// bcryptHashLen is the length of every bcrypt hash: $2a$, the cost, $, 22 characters of salt and 31
// of hash.
const bcryptHashLen = 60

// natsBcrypt is how nats-server tells a bcrypt hash from a plain password (server/auth.go).
var natsBcrypt = regexp.MustCompile(`^\$2[abxy]\$\d{2}\$.*`)

// checkBcrypt refuses a password that nats-server would take for a bcrypt hash but that is not a whole
// one (a hash cut short, or a plain password of that shape): NATS would compare every client's
// password against it as a hash, and its principal could never log in.
func checkBcrypt(password string) error {
	if !natsBcrypt.MatchString(password) {
		return nil
	}
	_, err := bcrypt.Cost([]byte(password))
	if err == nil && len(password) != bcryptHashLen {
		err = fmt.Errorf("%d characters", len(password))
	}
	if err != nil {
		return fmt.Errorf("password starts like a bcrypt hash ($2a$NN$...), so NATS reads it as one, but it is not a whole one (%v): paste the whole hash (%d characters), or choose a plain password of another shape", err, bcryptHashLen)
	}
	return nil
}

// maxWatchSweepMs is the largest watch_sweep_ms: one day, as for ack_deadline_ms.
const maxWatchSweepMs = wire.MaxAckDeadlineMs

// minWatchIdleMs and maxWatchIdleMs bound watch_idle_ms (when not 0): one second to one day.
const (
	minWatchIdleMs = 1_000
	maxWatchIdleMs = wire.MaxAckDeadlineMs
)

// checkPrefixSpace refuses a subject prefix whose subjects would fall in a space that section 9's
// permissions give away: every principal may subscribe to its inbox, _INBOX.<principal>.>, so under a
// prefix _INBOX (or _INBOX.<id>) the principal named "watch" would read every watch update and the
// one named "state" every request; admins may publish on $SRV.>, so under $SRV they could send
// requests as any principal. Other $ subjects belong to NATS itself (system events, JetStream).
func checkPrefixSpace(prefix string) error {
	first, _, _ := strings.Cut(prefix, ".")
	switch {
	case first == "_INBOX":
		return fmt.Errorf("_INBOX is the principals' inbox space, which each principal may read")
	case strings.HasPrefix(first, "$"):
		return fmt.Errorf("subjects starting with $ are reserved for NATS and service discovery")
	}
	return nil
}

// checkListen checks a listen address: host:port with a port number from 0 (any free port) to 65535.
// An empty address would have the server listen on every interface, on a random port; the host may
// be empty (":9095") to ask for every interface on purpose.
func checkListen(addr string) error {
	if addr == "" {
		return fmt.Errorf("empty address (want host:port, such as 127.0.0.1:9095)")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: %w", addr, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q: the port must be a number from 0 to 65535", addr)
	}
	return nil
}

// BoundsValue returns the default bounds with the [bounds] table applied, by the names of SPEC
// section 8.
func (c *Config) BoundsValue() (wire.Bounds, error) {
	b := wire.DefaultBounds()
	v := reflect.ValueOf(&b).Elem()
	byName := map[string]reflect.Value{}
	for i := range v.NumField() {
		byName[v.Type().Field(i).Tag.Get("toml")] = v.Field(i)
	}
	names := make([]string, 0, len(c.Bounds))
	for name := range c.Bounds {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f, ok := byName[name]
		if !ok {
			return b, fmt.Errorf("bounds: unknown bound %q", name)
		}
		f.SetInt(c.Bounds[name])
	}
	if err := b.Validate(); err != nil {
		return b, fmt.Errorf("bounds: %w", err)
	}
	return b, nil
}

// PolicyPrincipals are the principals the server answers: the configured ones, or the single admin
// dev principal when none is configured.
func (c *Config) PolicyPrincipals() []policy.Principal {
	if len(c.Principals) == 0 {
		return []policy.Principal{{ID: DevPrincipal, Admin: true}}
	}
	out := make([]policy.Principal, 0, len(c.Principals))
	for _, p := range c.Principals {
		out = append(out, policy.Principal{ID: p.ID, Admin: p.Admin})
	}
	return out
}

// DatabasePath is data_dir/state-store.db.
func (c *Config) DatabasePath() string { return filepath.Join(c.DataDir, DatabaseFile) }

// EnsureDataDir creates data_dir and its backups directory (where stated writes the backups it
// serves). A data_dir stated may not write thus fails the start here, naming it, before the store is
// opened (which would otherwise open unavailable, as for a damaged database) and NATS started.
func (c *Config) EnsureDataDir() error { return os.MkdirAll(c.BackupDir(), 0o700) }

// BackupDir is data_dir/backups.
func (c *Config) BackupDir() string { return filepath.Join(c.DataDir, "backups") }

// watchIdle is the server's bound on idle watches (server.Options.IdleWatch): watch_idle_ms, 0 off.
func (c *Config) watchIdle() time.Duration {
	return time.Duration(c.NATS.WatchIdleMs) * time.Millisecond
}

// minAdvisedWatchIdleMs is the least watch_idle_ms that keeps the watches of the project's clients at
// their defaults: an idle store/client Cache checks its watch every 5 s (DefaultCheckInterval) unless
// it acked meanwhile, so it may go two intervals, 10 s, plus a request's round trip, without naming
// it; statectl watch checks every 5 s. 15 s leaves a third interval to spare. (A lease campaign checks
// every RenewEvery, a third of its TTL by default: a long TTL needs a longer bound.)
const minAdvisedWatchIdleMs = 15_000

// watchIdleWarning says, when watch_idle_ms is set below minAdvisedWatchIdleMs, that it would close
// the watches of live clients; "" otherwise.
func (c *Config) watchIdleWarning() string {
	ms := c.NATS.WatchIdleMs
	if ms == 0 || ms >= minAdvisedWatchIdleMs {
		return ""
	}
	return fmt.Sprintf("nats.watch_idle_ms %d is below %d: an idle store/client Cache may go 10 s without naming its watch "+
		"(its liveness check runs every 5 s, skipped after an ack), statectl watch 5 s, a lease campaign twice its RenewEvery; "+
		"a bound that close closes (ACK_TIMEOUT) the watches of live clients, which then watch again", ms, minAdvisedWatchIdleMs)
}
