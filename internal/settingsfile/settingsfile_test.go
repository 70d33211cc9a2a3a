package settingsfile

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/BurntSushi/toml"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(stuckWriterEnv); path != "" {
		stuckWriter(path) // never returns: the test kills it
	}
	goleak.VerifyTestMain(m)
}

func writeFile(t *testing.T, path, content string, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sortedEntries(es []Entry) []Entry {
	out := slices.Clone(es)
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Key, b.Key) })
	return out
}

func sampleState() State {
	return State{
		Revision: maxInt,
		Entries: []Entry{
			{
				Key: "bridge/config", Schema: "keeppeek.preference.v1", Owner: "coordinator",
				Revision: maxInt, CreatedAtMs: 1764451200000, UpdatedAtMs: maxInt,
				Document: []byte(`{"kind":"x","n":9007199254740993,"s":"'''\"\\n\u00e9","nested":{"a":[1,2.5,null,true]}}`),
			},
			{
				Key: "a", Schema: "keeppeek.preference.v1", Owner: "alice",
				Revision: 1, CreatedAtMs: 0, UpdatedAtMs: 1,
				Document: []byte(`{}`),
			},
			{
				Key: "z/y.x_w-v", Schema: "s.v1", Owner: "bob",
				Revision: maxInt - 1, CreatedAtMs: maxInt - 1, UpdatedAtMs: maxInt - 1,
				Document: []byte(`{"multi":"line\nbreak","tab":"\t"}`),
			},
		},
	}
}

func assertStateEqual(t *testing.T, got, want State) {
	t.Helper()
	if got.Revision != want.Revision {
		t.Fatalf("revision: got %d, want %d", got.Revision, want.Revision)
	}
	g, w := sortedEntries(got.Entries), sortedEntries(want.Entries)
	if len(g) != len(w) {
		t.Fatalf("entries: got %d, want %d: %+v", len(g), len(w), g)
	}
	for i := range g {
		if !reflect.DeepEqual(g[i], w[i]) {
			t.Fatalf("entry %d:\n got %+v (%s)\nwant %+v (%s)", i, g[i], g[i].Document, w[i], w[i].Document)
		}
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stated.toml")
	f := Open(path)
	if f.Path() != path {
		t.Fatalf("Path() = %q, want %q", f.Path(), path)
	}
	want := sampleState()
	if err := f.Save("service/mqtt-bridge", want); err != nil {
		t.Fatal(err)
	}
	got, err := f.Load("service/mqtt-bridge")
	if err != nil {
		t.Fatal(err)
	}
	assertStateEqual(t, got, want)

	// A fresh File on the same path reads the same from disk.
	got2, err := Open(path).Load("service/mqtt-bridge")
	if err != nil {
		t.Fatal(err)
	}
	assertStateEqual(t, got2, want)

	// Saving again replaces the section: entries not in the new state are gone.
	next := State{Revision: maxInt, Entries: want.Entries[:1]}
	if err := f.Save("service/mqtt-bridge", next); err != nil {
		t.Fatal(err)
	}
	got3, err := f.Load("service/mqtt-bridge")
	if err != nil {
		t.Fatal(err)
	}
	assertStateEqual(t, got3, next)
}

func TestSaveCompactsDocument(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stated.toml")
	f := Open(path)
	s := State{Revision: 2, Entries: []Entry{{
		Key: "k", Schema: "s.v1", Owner: "o", Revision: 2, CreatedAtMs: 1, UpdatedAtMs: 2,
		Document: []byte(" { \"a\" : [ 1 , 2 ] ,\n \"b\" : \"x y\" } "),
	}}}
	if err := f.Save("system", s); err != nil {
		t.Fatal(err)
	}
	got, err := f.Load("system")
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"a":[1,2],"b":"x y"}`; string(got.Entries[0].Document) != want {
		t.Fatalf("document = %s, want %s", got.Entries[0].Document, want)
	}
}

func TestLoadSpecExample(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stated.toml")
	writeFile(t, path, `
[state_store.settings."service/mqtt-bridge"]
revision = 3

[state_store.settings."service/mqtt-bridge".entries."bridge/config"]
schema = "keeppeek.preference.v1"
owner = "coordinator"
revision = 3
created_at_ms = 1764451200000
updated_at_ms = 1764451260000
document = '{ "kind": "x" }'
`, 0o600)
	got, err := Open(path).Load("service/mqtt-bridge")
	if err != nil {
		t.Fatal(err)
	}
	assertStateEqual(t, got, State{Revision: 3, Entries: []Entry{{
		Key: "bridge/config", Schema: "keeppeek.preference.v1", Owner: "coordinator", Revision: 3,
		CreatedAtMs: 1764451200000, UpdatedAtMs: 1764451260000, Document: []byte(`{"kind":"x"}`),
	}}})
}

const otherContent = `# a comment that may be lost
data_dir = "./x"
subject_prefix = "kp"
started = 1979-05-27T07:32:00Z
ratio = 0.5
flags = [1, 2, 3]

[nats]
listen = "127.0.0.1:4222"

[[principals]]
id = "coordinator"
admin = true
password = "secret"

[[principals]]
id = "alice"
nkey = "UABC"

[bounds]
max_pending_updates = 32

[state_store]
other_option = "kept"

[state_store.settings."service/other"]
revision = 7

[state_store.settings."service/other".entries."k"]
schema = "s.v1"
owner = "coordinator"
revision = 5
created_at_ms = 100
updated_at_ms = 200
document = '{"x":1}'

[state_store.settings."service/mqtt-bridge"]
revision = 1

[state_store.settings."service/mqtt-bridge".entries."old"]
schema = "s.v1"
owner = "coordinator"
revision = 1
created_at_ms = 1
updated_at_ms = 1
document = '{}'
`

func decodeMap(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if _, err := toml.Decode(string(b), &m); err != nil {
		t.Fatalf("decode: %v\n%s", err, b)
	}
	return m
}

func TestOtherContentSurvives(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stated.toml")
	writeFile(t, path, otherContent, 0o640)
	before := decodeMap(t, []byte(otherContent))
	otherBefore, err := Open(path).Load("service/other")
	if err != nil {
		t.Fatal(err)
	}

	f := Open(path)
	want := sampleState()
	if err := f.Save("service/mqtt-bridge", want); err != nil {
		t.Fatal(err)
	}
	after := decodeMap(t, readFile(t, path))

	// Everything except the one section is equal, value for value and type for type.
	bSettings := before["state_store"].(map[string]any)["settings"].(map[string]any)
	aSettings := after["state_store"].(map[string]any)["settings"].(map[string]any)
	delete(bSettings, "service/mqtt-bridge")
	delete(aSettings, "service/mqtt-bridge")
	if !reflect.DeepEqual(before, after) {
		t.Fatalf("other content changed:\nbefore %#v\n after %#v", before, after)
	}
	// Spot checks, in case both sides lost something the same way.
	if after["data_dir"] != "./x" {
		t.Fatalf("data_dir = %#v", after["data_dir"])
	}
	if got := after["nats"].(map[string]any)["listen"]; got != "127.0.0.1:4222" {
		t.Fatalf("nats.listen = %#v", got)
	}
	ps, ok := after["principals"].([]map[string]any)
	if !ok || len(ps) != 2 || ps[0]["id"] != "coordinator" || ps[1]["id"] != "alice" || ps[0]["admin"] != true {
		t.Fatalf("principals = %#v", after["principals"])
	}
	if got := after["state_store"].(map[string]any)["other_option"]; got != "kept" {
		t.Fatalf("state_store.other_option = %#v", got)
	}

	// The saved section reads back, the other namespace is untouched.
	got, err := f.Load("service/mqtt-bridge")
	if err != nil {
		t.Fatal(err)
	}
	assertStateEqual(t, got, want)
	otherAfter, err := f.Load("service/other")
	if err != nil {
		t.Fatal(err)
	}
	assertStateEqual(t, otherAfter, otherBefore)
	if otherAfter.Revision != 7 || len(otherAfter.Entries) != 1 {
		t.Fatalf("service/other = %+v", otherAfter)
	}

	names, err := f.Namespaces()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"service/mqtt-bridge", "service/other"}) {
		t.Fatalf("Namespaces() = %q", names)
	}

	// Permission bits are kept.
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o640 {
		t.Fatalf("mode = %v, want 0640", info.Mode().Perm())
	}
	assertNoTempFiles(t, filepath.Dir(path), "stated.toml")
}

func TestMissingFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stated.toml")
	f := Open(path)
	s, err := f.Load("service/x")
	if err != nil {
		t.Fatal(err)
	}
	if s.Revision != 0 || len(s.Entries) != 0 {
		t.Fatalf("Load of missing file = %+v", s)
	}
	names, err := f.Namespaces()
	if err != nil || len(names) != 0 {
		t.Fatalf("Namespaces() = %q, %v", names, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Load created the file: %v", err)
	}

	if err := f.Save("service/x", State{}); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o600 {
		t.Fatalf("new file mode = %v, want 0600", info.Mode().Perm())
	}
	names, err = f.Namespaces()
	if err != nil || !slices.Equal(names, []string{"service/x"}) {
		t.Fatalf("Namespaces() = %q, %v", names, err)
	}
	s, err = f.Load("service/x")
	if err != nil || s.Revision != 0 || len(s.Entries) != 0 {
		t.Fatalf("Load = %+v, %v", s, err)
	}
	assertNoTempFiles(t, dir, "stated.toml")
}

func TestMissingSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stated.toml")
	writeFile(t, path, "data_dir = \"./x\"\n[state_store.settings.\"service/a\"]\nrevision = 4\n", 0o600)
	s, err := Open(path).Load("service/b")
	if err != nil {
		t.Fatal(err)
	}
	if s.Revision != 0 || len(s.Entries) != 0 {
		t.Fatalf("Load of missing section = %+v", s)
	}
	s, err = Open(path).Load("service/a")
	if err != nil || s.Revision != 4 {
		t.Fatalf("Load(service/a) = %+v, %v", s, err)
	}
}

func TestDeclaredEmptySection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stated.toml")
	writeFile(t, path, "[state_store.settings.\"service/mqtt-bridge\"]   # settings-backed\n", 0o600)
	f := Open(path)
	s, err := f.Load("service/mqtt-bridge")
	if err != nil {
		t.Fatal(err)
	}
	if s.Revision != 0 || len(s.Entries) != 0 {
		t.Fatalf("declared empty section = %+v", s)
	}
	names, err := f.Namespaces()
	if err != nil || !slices.Equal(names, []string{"service/mqtt-bridge"}) {
		t.Fatalf("Namespaces() = %q, %v", names, err)
	}
}

func TestMalformedSections(t *testing.T) {
	const head = "[state_store.settings.\"ns\"]\n"
	const entry = "[state_store.settings.\"ns\".entries.\"k\"]\n"
	good := map[string]string{
		"schema": `"s.v1"`, "owner": `"o"`, "revision": "1",
		"created_at_ms": "1", "updated_at_ms": "2", "document": `'{"a":1}'`,
	}
	entryWith := func(override map[string]string) string {
		var b strings.Builder
		b.WriteString(head + "revision = 1\n" + entry)
		for _, k := range []string{"schema", "owner", "revision", "created_at_ms", "updated_at_ms", "document", "extra"} {
			v, ok := override[k]
			if !ok {
				v, ok = good[k]
			}
			if ok && v != "" {
				fmt.Fprintf(&b, "%s = %s\n", k, v)
			}
		}
		return b.String()
	}
	// The good entry itself loads.
	{
		path := filepath.Join(t.TempDir(), "stated.toml")
		writeFile(t, path, entryWith(nil), 0o600)
		if s, err := Open(path).Load("ns"); err != nil || len(s.Entries) != 1 {
			t.Fatalf("good entry: %+v, %v", s, err)
		}
	}
	cases := map[string]string{
		"document not an object":     entryWith(map[string]string{"document": `'[1,2]'`}),
		"document a JSON string":     entryWith(map[string]string{"document": `'"x"'`}),
		"document invalid JSON":      entryWith(map[string]string{"document": `'{"a":'`}),
		"document trailing data":     entryWith(map[string]string{"document": `'{} {}'`}),
		"document a TOML table":      entryWith(map[string]string{"document": `{a = 1}`}),
		"document missing":           entryWith(map[string]string{"document": ""}),
		"entry revision a string":    entryWith(map[string]string{"revision": `"1"`}),
		"entry revision a float":     entryWith(map[string]string{"revision": `1.0`}),
		"entry revision negative":    entryWith(map[string]string{"revision": `-1`}),
		"entry revision zero":        entryWith(map[string]string{"revision": `0`}),
		"entry revision above ns":    entryWith(map[string]string{"revision": `2`}),
		"created_at_ms a string":     entryWith(map[string]string{"created_at_ms": `"1"`}),
		"updated_at_ms above 2^53-1": entryWith(map[string]string{"updated_at_ms": `9007199254740992`}),
		"schema an integer":          entryWith(map[string]string{"schema": `1`}),
		"schema empty":               entryWith(map[string]string{"schema": `""`}),
		"owner missing":              entryWith(map[string]string{"owner": ""}),
		"unknown entry key":          entryWith(map[string]string{"extra": `1`}),
		"section revision a string":  head + "revision = \"3\"\n",
		"section revision negative":  head + "revision = -3\n",
		"section revision too big":   head + "revision = 9007199254740992\n",
		"section unknown key":        head + "revision = 1\nttl_ms = 5\n",
		"section not a table":        "[state_store.settings]\nns = 1\n",
		"entries not a table":        head + "revision = 1\nentries = 3\n",
		"entry not a table":          head + "revision = 1\n[state_store.settings.\"ns\".entries]\nk = \"x\"\n",
		"entries an array of tables": head + "revision = 1\n[[state_store.settings.\"ns\".entries]]\nschema = \"s\"\n",
		"duplicate entry keys":       entryWith(nil) + entry + "schema = \"s.v1\"\n",
		"duplicate key in entry":     entryWith(map[string]string{"extra": ""}) + "owner = \"p\"\n",
		"duplicate section":          head + "revision = 1\n" + head,
		"state_store not a table":    "state_store = 1\n",
		"settings not a table":       "[state_store]\nsettings = \"x\"\n",
		"file not TOML":              "this is not = = toml\n",
		"entry revision without ns":  head + entry + "schema = \"s\"\nowner = \"o\"\nrevision = 1\ncreated_at_ms = 1\nupdated_at_ms = 1\ndocument = '{}'\n",
		"document blank":             entryWith(map[string]string{"document": `'   '`}),
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "stated.toml")
			writeFile(t, path, content, 0o600)
			f := Open(path)
			s, err := f.Load("ns")
			if err == nil {
				t.Fatalf("Load succeeded: %+v\nfile:\n%s", s, content)
			}
			// Save must refuse to rewrite a file it cannot parse, and leave it unchanged.
			if _, derr := toml.Decode(content, new(map[string]any)); derr != nil || name == "state_store not a table" || name == "settings not a table" {
				if err := f.Save("other", State{}); err == nil {
					t.Fatalf("Save over an unusable file succeeded")
				}
				if got := readFile(t, path); string(got) != content {
					t.Fatalf("file changed by failed Save:\n%s", got)
				}
			}
		})
	}
}

func TestNamespacesRejectsNonTable(t *testing.T) {
	path := filepath.Join(t.TempDir(), "stated.toml")
	writeFile(t, path, "[state_store.settings]\nns = 1\n[state_store.settings.\"b\"]\n", 0o600)
	if names, err := Open(path).Namespaces(); err == nil {
		t.Fatalf("Namespaces() = %q, want an error", names)
	}
}

func TestSaveRejectsInvalidState(t *testing.T) {
	ok := Entry{Key: "k", Schema: "s.v1", Owner: "o", Revision: 1, CreatedAtMs: 1, UpdatedAtMs: 1, Document: []byte(`{}`)}
	with := func(mod func(*Entry)) State {
		e := ok
		mod(&e)
		return State{Revision: 1, Entries: []Entry{e}}
	}
	cases := map[string]State{
		"document not an object": with(func(e *Entry) { e.Document = []byte(`[1]`) }),
		"document invalid":       with(func(e *Entry) { e.Document = []byte(`{"a"`) }),
		"document empty":         with(func(e *Entry) { e.Document = nil }),
		"empty key":              with(func(e *Entry) { e.Key = "" }),
		"empty schema":           with(func(e *Entry) { e.Schema = "" }),
		"empty owner":            with(func(e *Entry) { e.Owner = "" }),
		"invalid UTF-8 owner":    with(func(e *Entry) { e.Owner = "\xff" }),
		"entry revision 0":       with(func(e *Entry) { e.Revision = 0 }),
		"entry revision above":   with(func(e *Entry) { e.Revision = 2 }),
		"negative created":       with(func(e *Entry) { e.CreatedAtMs = -1 }),
		"updated above 2^53-1":   with(func(e *Entry) { e.UpdatedAtMs = maxInt + 1 }),
		"revision above 2^53-1":  {Revision: maxInt + 1},
		"duplicate keys":         {Revision: 1, Entries: []Entry{ok, ok}},
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "stated.toml")
	writeFile(t, path, otherContent, 0o600)
	f := Open(path)
	for name, s := range cases {
		t.Run(name, func(t *testing.T) {
			if err := f.Save("service/mqtt-bridge", s); err == nil {
				t.Fatalf("Save(%+v) succeeded", s)
			}
			if got := readFile(t, path); string(got) != otherContent {
				t.Fatalf("file changed by rejected Save:\n%s", got)
			}
		})
	}
	if err := f.Save("", State{}); err == nil {
		t.Fatal("Save with an empty namespace succeeded")
	}
	if _, err := f.Load(""); err == nil {
		t.Fatal("Load with an empty namespace succeeded")
	}
	assertNoTempFiles(t, dir, "stated.toml")
}

func assertNoTempFiles(t *testing.T, dir string, want ...string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("directory holds %q, want %q", names, want)
	}
}

func TestSaveFailureParentIsFile(t *testing.T) {
	dir := t.TempDir()
	parent := filepath.Join(dir, "notadir")
	writeFile(t, parent, otherContent, 0o600)
	f := Open(filepath.Join(parent, "stated.toml"))
	if err := f.Save("service/mqtt-bridge", sampleState()); err == nil {
		t.Fatal("Save under a regular file succeeded")
	}
	if got := readFile(t, parent); string(got) != otherContent {
		t.Fatalf("parent file changed:\n%s", got)
	}
	assertNoTempFiles(t, dir, "notadir")
}

// TestSaveFailureAtRename: everything up to the rename succeeds, the rename
// fails; the original is byte-identical and the temporary file is removed.
func TestSaveFailureAtRename(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stated.toml")
	writeFile(t, path, otherContent, 0o600)

	var tmpSeen string
	var tmpContent []byte
	rename = func(from, to string) error {
		tmpSeen = from
		tmpContent, _ = os.ReadFile(from)
		return errors.New("injected rename failure")
	}
	t.Cleanup(func() { rename = os.Rename })

	err := Open(path).Save("service/mqtt-bridge", sampleState())
	if err == nil || !strings.Contains(err.Error(), "injected rename failure") {
		t.Fatalf("Save error = %v, want the injected failure", err)
	}
	if filepath.Dir(tmpSeen) != dir {
		t.Fatalf("temporary file %q is not in %q", tmpSeen, dir)
	}
	if !bytes.Contains(tmpContent, []byte("bridge/config")) {
		t.Fatalf("temporary file did not hold the new content:\n%s", tmpContent)
	}
	if got := readFile(t, path); string(got) != otherContent {
		t.Fatalf("file changed by failed Save:\n%s", got)
	}
	assertNoTempFiles(t, dir, "stated.toml")
}

func TestSaveFollowsSymlink(t *testing.T) {
	dir := t.TempDir()
	realPath := filepath.Join(dir, "realPath.toml")
	link := filepath.Join(dir, "link.toml")
	writeFile(t, realPath, "data_dir = \"./x\"\n", 0o644)
	if err := os.Symlink("realPath.toml", link); err != nil {
		t.Fatalf("symlink: %v", err)
	}
	f := Open(link)
	if err := f.Save("service/a", State{Revision: 2}); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("link replaced: %v, %v", fi, err)
	}
	m := decodeMap(t, readFile(t, realPath))
	if m["data_dir"] != "./x" {
		t.Fatalf("data_dir lost: %#v", m)
	}
	s, err := Open(realPath).Load("service/a")
	if err != nil || s.Revision != 2 {
		t.Fatalf("Load via realPath path = %+v, %v", s, err)
	}
	if fi, _ := os.Stat(realPath); fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode = %v, want 0644", fi.Mode().Perm())
	}
}

func TestConcurrentSaves(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "stated.toml")
	writeFile(t, path, "data_dir = \"./x\"\n", 0o600)
	f := Open(path)

	namespaces := []string{"service/a", "service/b", "user/carol", "group/g"}
	const rounds = 20
	var wg sync.WaitGroup
	errs := make(chan error, len(namespaces)*rounds*2)
	for _, ns := range namespaces {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := uint64(1); r <= rounds; r++ {
				s := State{Revision: r, Entries: []Entry{{
					Key: "k", Schema: "s.v1", Owner: "o", Revision: r, CreatedAtMs: 1, UpdatedAtMs: int64(r),
					Document: []byte(fmt.Sprintf(`{"ns":%q,"r":%d}`, ns, r)),
				}}}
				if err := f.Save(ns, s); err != nil {
					errs <- err
					return
				}
				if _, err := f.Load(ns); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	g := Open(path)
	names, err := g.Namespaces()
	if err != nil {
		t.Fatal(err)
	}
	want := slices.Clone(namespaces)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("Namespaces() = %q, want %q", names, want)
	}
	for _, ns := range namespaces {
		s, err := g.Load(ns)
		if err != nil {
			t.Fatal(err)
		}
		if s.Revision != rounds || len(s.Entries) != 1 ||
			string(s.Entries[0].Document) != fmt.Sprintf(`{"ns":%q,"r":%d}`, ns, rounds) {
			t.Fatalf("%s = %+v", ns, s)
		}
	}
	if m := decodeMap(t, readFile(t, path)); m["data_dir"] != "./x" {
		t.Fatalf("data_dir lost: %#v", m)
	}
	assertNoTempFiles(t, dir, "stated.toml")
}
