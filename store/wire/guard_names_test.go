package wire_test

import (
	"testing"

	"github.com/keeppeek/coordination/store/wire"
)

// TestGuardFieldNamesAreExact: the guard of a put or a delete is read as strictly as the request
// around it (SPEC 1: an unknown field is INVALID_ARGUMENT). encoding/json matches the names of a
// nested object ignoring case (and with Unicode folding) and lets a repeated name win over the
// first, so a guard spelled `{"KEY":...}` or naming its key twice once fenced on whatever came last.
func TestGuardFieldNamesAreExact(t *testing.T) {
	guards := []struct {
		name  string
		guard string
		ok    bool
	}{
		{"exact", `{"key":"leases/a","revision":2}`, true},
		{"exact, spaced", ` { "revision" : 2 , "key" : "leases/a" } `, true},
		{"KEY", `{"KEY":"leases/a","revision":2}`, false},
		{"Key", `{"Key":"leases/a","revision":2}`, false},
		{"Revision", `{"key":"leases/a","Revision":2}`, false},
		{"kelvin sign", `{"\u212aey":"leases/a","revision":2}`, false},
		{"escaped name", `{"k\u0065y":"leases/a","revision":2}`, false},
		{"key twice", `{"key":"leases/a","key":"leases/b","revision":2}`, false},
		{"revision twice", `{"key":"leases/a","revision":2,"revision":3}`, false},
		{"key and KEY", `{"key":"leases/a","KEY":"leases/b","revision":2}`, false},
		{"trailing comma", `{"key":"leases/a","revision":2,}`, false},
	}
	for _, g := range guards {
		for _, c := range []struct {
			op          wire.Op
			where, body string
		}{
			{wire.OpPut, "last", `{"request_id":1,"namespace":"user/alice","key":"k","schema":"s","document":{},"guard":` + g.guard + `}`},
			{wire.OpPut, "first", `{"guard":` + g.guard + `,"namespace":"user/alice","key":"k","schema":"s","document":{}}`},
			{wire.OpDelete, "last", `{"request_id":1,"namespace":"user/alice","key":"k","guard":` + g.guard + `}`},
		} {
			t.Run(string(c.op)+"/"+c.where+"/"+g.name, func(t *testing.T) {
				err := decoders[c.op](c.body)
				if g.ok {
					if err != nil {
						t.Fatalf("%s: %v", c.body, err)
					}
					return
				}
				wantInvalidArgument(t, err)
			})
		}
	}
	// What was accepted is what was sent.
	for _, op := range []wire.Op{wire.OpPut, wire.OpDelete} {
		var g *wire.Guard
		switch op {
		case wire.OpPut:
			r, err := decodeValidate[wire.PutRequest](`{"namespace":"user/alice","key":"k","schema":"s","document":{},"guard":{"revision":7,"key":"leases/a"}}`)
			if err != nil {
				t.Fatal(err)
			}
			g = r.Guard
		case wire.OpDelete:
			r, err := decodeValidate[wire.DeleteRequest](`{"namespace":"user/alice","key":"k","guard":{"revision":7,"key":"leases/a"}}`)
			if err != nil {
				t.Fatal(err)
			}
			g = r.Guard
		}
		if g == nil || *g != (wire.Guard{Key: "leases/a", Revision: 7}) {
			t.Fatalf("%s: guard %+v", op, g)
		}
	}
}

// TestRequestIDOfEscapedName: RequestIDOf reads the id as Decode reads fields, and Decode takes a name
// with an escape (`request\u005fid`) for an unknown field, never for request_id.
func TestRequestIDOfEscapedName(t *testing.T) {
	for _, c := range []struct {
		body string
		want int64
	}{
		{`{"request\u005fid":5}`, 0},
		{`{"request_id":1,"request\u005fid":3}`, 1},
		{`{"request\u005fid":3,"request_id":1}`, 1},
		{`{"\u0072equest_id":5,"key":"k"}`, 0},
		{`{"key":"a\"b","request_id":4}`, 4},
		{`{"k\\":"x", "request_id" :4}`, 4},
	} {
		if got := wire.RequestIDOf([]byte(c.body)); got != c.want {
			t.Errorf("RequestIDOf(%s) = %d, want %d", c.body, got, c.want)
		}
	}
}
