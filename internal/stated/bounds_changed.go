package stated

import (
	"fmt"
	"reflect"

	"github.com/keeppeek/coordination/store/wire"
)

// changedBounds names each bound that differs between was and will, with both values
// ("max_pending_updates 32 -> 16"), in the order of wire.Bounds.
func changedBounds(was, will wire.Bounds) []string {
	var out []string
	a, b := reflect.ValueOf(was), reflect.ValueOf(will)
	for i := range a.NumField() {
		if x, y := a.Field(i).Int(), b.Field(i).Int(); x != y {
			out = append(out, fmt.Sprintf("%s %d -> %d", a.Type().Field(i).Tag.Get("toml"), x, y))
		}
	}
	return out
}
