package stated

import "testing"

// Listen addresses are checked when the configuration is read: an empty http_listen would make
// net.Listen take every interface on a random port (metrics and health open to the network where
// loopback was the point), and a bad port would surface only once NATS and the store were up.
func TestLoadConfigRejectsBadListenAddresses(t *testing.T) {
	for name, body := range map[string]string{
		"empty http_listen":         "http_listen = \"\"\n",
		"http_listen without port":  "http_listen = \"127.0.0.1\"\n",
		"http_listen port too high": "http_listen = \"127.0.0.1:70000\"\n",
		"http_listen port not num":  "http_listen = \"127.0.0.1:http\"\n",
		"nats listen without port":  "[nats]\nlisten = \"localhost\"\n",
		"nats listen port too high": "[nats]\nlisten = \"127.0.0.1:99999\"\n",
	} {
		if _, err := LoadConfig(writeConfig(t, body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for name, body := range map[string]string{
		"free port":      "http_listen = \"127.0.0.1:0\"\n[nats]\nlisten = \"127.0.0.1:0\"\n",
		"all interfaces": "http_listen = \":9095\"\n[nats]\nlisten = \"0.0.0.0:4222\"\n",
		"ipv6 loopback":  "http_listen = \"[::1]:9095\"\n",
	} {
		if _, err := LoadConfig(writeConfig(t, body)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
