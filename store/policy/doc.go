// Package policy holds the Principal and the namespace policy of SPEC section 2: who may read and who
// may write each namespace form. Every transport asks the same functions, through the engine, so the
// rules cannot differ between them.
package policy
