package stated

import (
	"strings"
	"testing"
)

// Two principals with one nkey are one NATS user: the embedded server keys nkey users by their
// public key, so the last would silently take the first's place, and the key's holder could act only
// as one of them. The configuration is refused, as two principals with one id are.
func TestLoadConfigRejectsAnNkeySharedByTwoPrincipals(t *testing.T) {
	const key = "UCQQMSRE3RWAQSET43FQ5MWMAZURBH4KIMVLXL2HLHCK5SKICYCJKWIL"
	_, err := LoadConfig(writeConfig(t, `
[[principals]]
id = "a"
nkey = "`+key+`"

[[principals]]
id = "b"
admin = true
nkey = "`+key+`"
`))
	if err == nil || !strings.Contains(err.Error(), "nkey") {
		t.Fatalf("a shared nkey: %v", err)
	}
}
