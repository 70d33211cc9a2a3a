package server_test

import (
	"testing"

	"github.com/keeppeek/coordination/internal/testenv"
	"github.com/keeppeek/coordination/store/wire"
)

// TestUnknownPrincipalShapeChecksFirst: SPEC section 5 checks a request's shape (1) before the
// namespace policy (2), which refuses a principal the server does not know. Where NATS does not
// enforce identities (the dev principal's configuration, an external cluster without permissions)
// anyone can publish under a principal token that is not configured: a malformed request there is
// INVALID_ARGUMENT, with its request_id echoed as for a known principal, and a well-formed one
// PERMISSION_DENIED.
func TestUnknownPrincipalShapeChecksFirst(t *testing.T) {
	env := testenv.Start(t, testenv.Options{})
	nc := env.Connect(t, "alice")
	for _, tc := range []struct {
		op   wire.Op
		body string
		id   int64
		code wire.Code
	}{
		{wire.OpGet, `not json`, 0, wire.CodeInvalidArgument},
		{wire.OpGet, `{"request_id":4,"namespace":"foo/x","key":"k"}`, 4, wire.CodeInvalidArgument},
		{wire.OpPut, `{"request_id":5,"namespace":"user/mallory","key":"k","schema":"keeppeek.preference.v1","document":{"kind":"ui"},"owner":"mallory"}`, 5, wire.CodeInvalidArgument},
		{wire.OpDelete, `{"request_id":6,"namespace":"user/mallory","key":"k","expected_revision":0}`, 6, wire.CodeInvalidArgument},
		{wire.OpList, `{"request_id":7,"namespace":"user/mallory","limit":257}`, 7, wire.CodeInvalidArgument},
		{wire.OpWatch, `{"request_id":8,"watch_id":"a.b","namespace":"user/mallory"}`, 8, wire.CodeInvalidArgument},
		{wire.OpUnwatch, `{"request_id":9}`, 9, wire.CodeInvalidArgument},
		{wire.OpAck, `{"request_id":10,"watch_id":"w"}`, 10, wire.CodeInvalidArgument},
		{wire.OpInfo, `{"request_id":-1}`, 0, wire.CodeInvalidArgument},
		{wire.OpGet, `{"request_id":11,"namespace":"user/mallory","key":"k"}`, 11, wire.CodePermissionDenied},
		{wire.OpPut, `{"request_id":12,"namespace":"user/mallory","key":"k","schema":"keeppeek.preference.v1","document":{"kind":"ui"}}`, 12, wire.CodePermissionDenied},
		{wire.OpWatch, `{"request_id":13,"watch_id":"w","namespace":"user/mallory"}`, 13, wire.CodePermissionDenied},
		{wire.OpAck, `{"request_id":14,"watch_id":"w","applied_sequence":0}`, 14, wire.CodePermissionDenied},
		{wire.OpInfo, `{"request_id":15}`, 15, wire.CodePermissionDenied},
	} {
		r := request(t, nc, "mallory", tc.op, tc.body)
		if r.OK || r.Error == nil || r.Error.Code != tc.code || r.RequestID != tc.id {
			t.Errorf("%s %s as an unknown principal: %+v, want %s with request_id %d", tc.op, tc.body, r, tc.code, tc.id)
		}
	}
}
