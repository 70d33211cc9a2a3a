package schema

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/keeppeek/coordination/store/wire"
)

// The registered schema ids of SPEC section 13.
const (
	// MediaIntentV1 is a desired publication or subscription; allowed in service and user namespaces.
	MediaIntentV1 = wire.SchemaMediaIntent
	// LeaseV1 is a worker's claim on a piece of work; allowed in service namespaces.
	LeaseV1 = wire.SchemaLease
	// ObservedStatusV1 is what a worker observed for an intent; allowed in service and user namespaces.
	ObservedStatusV1 = wire.SchemaObservedStatus
	// PreferenceV1 is a display or audio preference; allowed in user and group namespaces.
	PreferenceV1 = wire.SchemaPreference
	// WorkerStatusV1 is a worker heartbeat written by the server; allowed in the system namespace only.
	WorkerStatusV1 = wire.SchemaWorkerStatus
)

// maxMessageBytes bounds observed-status message, in bytes (JSON Schema maxLength counts characters).
const maxMessageBytes = 256

// maxErrorMessageBytes bounds the message of a schema mismatch error.
const maxErrorMessageBytes = 1024

// maxReported bounds how many schema mismatches one error message lists.
const maxReported = 4

// where is the "where" column of SPEC section 13: the namespace kinds each schema may be used in.
var where = map[string][]wire.NamespaceKind{
	MediaIntentV1:    {wire.KindService, wire.KindUser},
	LeaseV1:          {wire.KindService},
	ObservedStatusV1: {wire.KindService, wire.KindUser},
	PreferenceV1:     {wire.KindUser, wire.KindGroup},
	WorkerStatusV1:   {wire.KindSystem},
}

// extraChecks are the rules of a schema JSON Schema cannot state; they run after the JSON Schema.
var extraChecks = map[string]func(doc map[string]any) error{
	ObservedStatusV1: func(doc map[string]any) error {
		if m, ok := doc["message"].(string); ok && len(m) > maxMessageBytes {
			return wire.Errorf(wire.CodeSchemaInvalid, "document does not match %s: at %q: message is %d bytes, at most %d are allowed",
				ObservedStatusV1, "/message", len(m), maxMessageBytes)
		}
		return nil
	},
}

// idPrefix prefixes a schema id to form the $id of its file.
const idPrefix = "urn:keeppeek:schema:"

//go:embed schemas/*.json
var schemaFiles embed.FS

// entry is one compiled schema.
type entry struct {
	schema *jsonschema.Schema
	kinds  []wire.NamespaceKind
}

// Registry holds the compiled registered schemas. Its schemas are immutable after New; it is safe for
// concurrent use.
type Registry struct {
	entries map[string]entry
	ids     []string
	passed  passedSet
}

// New compiles every embedded schema (schemas/<id>.json) and returns the registry. It fails when a
// schema does not compile, or when the embedded files and the registered ids of SPEC section 13 differ.
func New() (*Registry, error) {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	files, err := fs.Glob(schemaFiles, "schemas/*.json")
	if err != nil {
		return nil, fmt.Errorf("schema: list embedded schemas: %w", err)
	}
	r := &Registry{entries: make(map[string]entry, len(files))}
	for _, file := range files {
		id := strings.TrimSuffix(path.Base(file), ".json")
		kinds, ok := where[id]
		if !ok {
			return nil, fmt.Errorf("schema: embedded %s is not a registered schema", file)
		}
		data, err := schemaFiles.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("schema: read %s: %w", file, err)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("schema: parse %s: %w", file, err)
		}
		url := idPrefix + id
		obj, ok := doc.(map[string]any)
		if !ok || obj["$id"] != url || obj["title"] != id {
			return nil, fmt.Errorf("schema: %s must be an object with $id %q and title %q", file, url, id)
		}
		if err := c.AddResource(url, doc); err != nil {
			return nil, fmt.Errorf("schema: add %s: %w", file, err)
		}
		sch, err := c.Compile(url)
		if err != nil {
			return nil, fmt.Errorf("schema: compile %s: %w", file, err)
		}
		r.entries[id] = entry{schema: sch, kinds: kinds}
		r.ids = append(r.ids, id)
	}
	for id := range where {
		if _, ok := r.entries[id]; !ok {
			return nil, fmt.Errorf("schema: registered schema %s has no embedded file", id)
		}
	}
	slices.Sort(r.ids)
	return r, nil
}

// noLoader refuses to load any schema that is not embedded: compiling never touches the disk or the
// network.
type noLoader struct{}

// Load implements jsonschema.URLLoader.
func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("schema %s is not embedded", url)
}

// IDs returns the registered schema ids, sorted. The caller owns the slice.
func (r *Registry) IDs() []string { return slices.Clone(r.ids) }

// Registered reports whether id is a registered schema id.
func (r *Registry) Registered(id string) bool {
	_, ok := r.entries[id]
	return ok
}

// Validate checks a document for a put of schema id in namespace. It runs, in order: id must be
// registered; the namespace's kind must be in the schema's "where" column (worker-status in system
// only); document, one JSON object, must match the schema (including the byte limit of observed-status
// message); and the content guard (Guard) must accept it. Every failure is a *wire.Error with code
// wire.CodeSchemaInvalid whose message names the property or path at fault.
func (r *Registry) Validate(id, namespace string, document []byte) error {
	return r.ValidateSum(id, namespace, document, sha256.Sum256(document))
}

// ValidateSum is Validate for a caller that already has the document's SHA-256, sum. A document that
// passed its schema and the guard once passes again without being decoded: both depend on nothing but
// the schema id and the document's bytes, so the registry remembers the SHA-256 of the latest few
// thousand that passed. The namespace check runs every time.
func (r *Registry) ValidateSum(id, namespace string, document []byte, sum [sha256.Size]byte) error {
	e, ok := r.entries[id]
	if !ok {
		return wire.Errorf(wire.CodeSchemaInvalid, "unregistered schema %q", truncate(id, maxTokenBytes))
	}
	kind, _, ok := wire.ParseNamespace(namespace)
	if !ok {
		return wire.Errorf(wire.CodeSchemaInvalid, "schema %s may not be used in namespace %q: not a valid namespace",
			id, truncate(namespace, maxTokenBytes))
	}
	if !slices.Contains(e.kinds, kind) {
		return wire.Errorf(wire.CodeSchemaInvalid, "schema %s may not be used in namespace %q: allowed only in %s",
			id, namespace, kindList(e.kinds))
	}
	key := passedKey{id: id, sum: sum}
	if r.passed.has(key) {
		return nil
	}
	v, err := decodeForSchema(document)
	if err != nil {
		return err
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return wire.Errorf(wire.CodeSchemaInvalid, "document must be a JSON object, got %s", jsonType(v))
	}
	if err := e.schema.Validate(obj); err != nil {
		return mismatch(id, err)
	}
	if check := extraChecks[id]; check != nil {
		if err := check(obj); err != nil {
			return err
		}
	}
	if err := guardValue(obj, nil); err != nil {
		return err
	}
	r.passed.add(key)
	return nil
}

// passedKey names a document that passed a schema: the schema id and the document's SHA-256.
type passedKey struct {
	id  string
	sum [sha256.Size]byte
}

// passedGeneration bounds the set: it keeps between one and two generations of this many documents
// (some 4,000 entries of about 120 bytes each, half a megabyte at most), the older dropped whole when
// the newer fills.
const passedGeneration = 2048

// passedSet remembers documents that passed, in two generations: a hit in the older one moves to the
// newer, so documents written again and again stay while the rest age out.
type passedSet struct {
	mu       sync.Mutex
	cur, old map[passedKey]struct{}
}

func (p *passedSet) has(k passedKey) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.cur[k]; ok {
		return true
	}
	if _, ok := p.old[k]; ok {
		p.addLocked(k)
		return true
	}
	return false
}

func (p *passedSet) add(k passedKey) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.addLocked(k)
}

func (p *passedSet) addLocked(k passedKey) {
	if len(p.cur) >= passedGeneration {
		p.old, p.cur = p.cur, nil
	}
	if p.cur == nil {
		p.cur = make(map[passedKey]struct{}, 64)
	}
	p.cur[k] = struct{}{}
}

func (p *passedSet) len() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.cur) + len(p.old)
}

// kindList renders namespace kinds for a message: "service/<id> or user/<id>".
func kindList(kinds []wire.NamespaceKind) string {
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		if k == wire.KindSystem {
			parts[i] = string(k)
		} else {
			parts[i] = string(k) + "/<id>"
		}
	}
	return strings.Join(parts, " or ")
}
