package main_test

import (
	"strings"
	"testing"
)

// A document saved by a Windows editor starts with a UTF-8 byte order mark and ends its lines with
// CRLF. It was refused as "document must be a JSON object", which sent the user looking at braces
// that were there. statectl drops one leading UTF-8 BOM, as kubectl and Go's own JSON-reading tools
// of the kind do, and takes CRLF and trailing whitespace as the JSON whitespace they are; a UTF-16
// file (its BOM says so) is refused with a message that names its encoding.
func TestPutTakesADocumentWithAByteOrderMark(t *testing.T) {
	e := start(t, "")
	const bom = "\uFEFF"
	windows := bom + "{\r\n  \"holder\": \"w1\",\r\n  \"claimed_at_ms\": 1\r\n}\r\n \t\r\n"
	e.ok("put", "service/tx", "bom-file", leaseSchema, e.file("bom.json", windows))
	if got := e.getJSON("service/tx", "bom-file"); string(got.Document) != leaseDoc {
		t.Fatalf("document from a file with a BOM: %s, want %s", got.Document, leaseDoc)
	}
	if r := e.runIn(windows, "put", "service/tx", "bom-stdin", leaseSchema, "-"); r.code != 0 {
		t.Fatalf("put of a document with a BOM from stdin: %s", r)
	}
	if got := e.getJSON("service/tx", "bom-stdin"); string(got.Document) != leaseDoc {
		t.Fatalf("document from stdin with a BOM: %s, want %s", got.Document, leaseDoc)
	}
	// Only one BOM is a BOM: a second is content, and JSON has no place for it.
	r := e.failsIn(bom+bom+leaseDoc, 1, "STATE_STORE_ERROR_CODE_INVALID_ARGUMENT", "put", "service/tx", "two-boms", leaseSchema)
	if !strings.Contains(r.stderr, "byte order mark") {
		t.Fatalf("a second BOM: the message does not name it: %s", r)
	}
	// UTF-16 (as PowerShell 5's Out-File writes it): refused, saying so.
	utf16 := []byte{0xFF, 0xFE}
	for _, c := range leaseDoc {
		utf16 = append(utf16, byte(c), 0)
	}
	r = e.fails(1, "STATE_STORE_ERROR_CODE_INVALID_ARGUMENT", "put", "service/tx", "utf16", leaseSchema, e.file("utf16.json", string(utf16)))
	if !strings.Contains(r.stderr, "UTF-16") {
		t.Fatalf("a UTF-16 document: the message does not name the encoding: %s", r)
	}
}
