// Package schema is the registry of the document schemas of the coordination plane (SPEC section 13)
// and its content guard. Each registered schema is a JSON Schema (draft 2020-12) file embedded from
// schemas/, compiled once by New; a Registry is immutable afterwards and safe for concurrent use.
// Registry.Validate checks, in order, that a schema id is registered, that it may be used in the
// namespace's kind (its "where" column), that the document matches the JSON Schema together with the
// few rules JSON Schema cannot express (byte lengths), and finally the content guard. Guard alone
// rejects content the store must never hold, at any depth: property names that name credentials or
// session descriptions, encoded binary blobs, data URIs, PEM blocks, SDP and logs. Every rejection is a
// *wire.Error with code wire.CodeSchemaInvalid whose message names the offending property or path and
// never echoes a rejected string value.
package schema
