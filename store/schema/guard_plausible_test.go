package schema

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"
)

// pemKeys returns real private keys in PEM, as a user might paste them.
func pemKeys(t *testing.T) map[string]string {
	t.Helper()
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, err := x509.MarshalECPrivateKey(ec)
	if err != nil {
		t.Fatal(err)
	}
	_, ed, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	edDER, err := x509.MarshalPKCS8PrivateKey(ed)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"EC":      string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER})),
		"PKCS8":   string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: edDER})),
		"OpenSSH": "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n-----END OPENSSH PRIVATE KEY-----\n",
	}
}

// pngBase64 returns a real PNG image of a few kilobytes, base64-encoded.
func pngBase64(t *testing.T) string {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 32, 32))
	noise := make([]byte, 32*32*3)
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	for i := range 32 * 32 {
		img.Set(i%32, i/32, color.RGBA{noise[3*i], noise[3*i+1], noise[3*i+2], 255})
	}
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	s := base64.StdEncoding.EncodeToString(buf.Bytes())
	if len(s) <= 2*blobMinBytes {
		t.Fatalf("the PNG is only %d bytes of base64", len(s))
	}
	return s
}

// TestGuardPlausibleInputs judges, with SPEC section 13's words, what users plausibly write: ordinary
// intents and statuses must pass; credentials, media bytes, SDP and logs must not, however they are
// spelled (other line endings, escapes, nesting). Where SPEC's words judge each string by itself (a blob
// is one string over 1,024 bytes), pieces of a blob split across strings pass: that is SPEC's rule, and
// max_document_bytes bounds what such a document can carry.
func TestGuardPlausibleInputs(t *testing.T) {
	r := newRegistry(t)
	intent := func(params map[string]any) []byte {
		return mustJSON(t, map[string]any{"role": "publish", "desired": true, "source_id": "front-door", "media_kind": "video",
			"recording_mode": "inherit", "parameters": params})
	}
	status := func(msg string) []byte {
		return mustJSON(t, map[string]any{"subject_key": "intents/front-door", "state": "failed", "observed_at_ms": 1,
			"message": msg})
	}

	// Ordinary documents: words that only contain a forbidden one, prose, URLs, tuning strings, notes of
	// up to 8 lines, things that merely mention data:, BEGIN, v=0.
	prose := strings.Repeat("The camera at the front door streams 720p video to the browser viewers. ", 30)
	for name, doc := range map[string][]byte{
		"tuning": intent(map[string]any{"transcoder-a": map[string]any{
			"keyframe_interval_ms": 2000, "keyFrameInterval": 2, "max_tokens": 5, "tokenizer": "bpe", "bitrate_kbps": 2500,
			"passthrough": false, "x264_opts": "keyint=60:min-keyint=60:scenecut=0", "public_key_pinning": false,
			"publicKey": "none", "author": "ops", "secretary_desk": "left", "cookies_banner": "off", "api_version": "v2",
			"access_level": "viewer", "sdpx": 1, "credentialed": true, "overlay_text": "Front door — live ✓",
		}}),
		"cv worker": intent(map[string]any{"cv-worker": map[string]any{
			"model": "yolov8n", "labels": []any{"person", "car", "dog"}, "threshold": 0.45, "roi": []any{[]any{0, 0}, []any{640, 360}},
			"metadata_url": "https://models.example.com/yolov8n/metadata.json?format=data:json",
			"notes":        "one\ntwo\r\nthree\nfour\nfive\nsix\nseven\neight\nnine",
		}}),
		"long prose":          intent(map[string]any{"viewer": map[string]any{"description": prose}}),
		"URL of 1,000 bytes":  intent(map[string]any{"viewer": map[string]any{"poster": "https://cdn.example.com/" + strings.Repeat("posters/front-door-720p.jpg?v=2&", 30)}}),
		"metadata message":    status("metadata: 3 frames dropped, retrying"),
		"Data message":        status("Data: none received for 30 s"),
		"dashes message":      status("----- BEGIN of retry log ----- attempt 3"),
		"v=0 message":         status("v=0 means the first version; o= is the origin"),
		"8 lines message":     status("a\r\nb\r\nc\r\nd\r\ne\r\nf\r\ng\r\nh\r\ni"),
		"SDP word in message": status("SDP negotiation failed: no common codec"),
		"hex digest":          status(strings.Repeat("0123456789abcdef", 16)), // a SHA-256 list of 256 bytes
	} {
		id := MediaIntentV1
		ns := "service/coordinator"
		if strings.Contains(name, "message") || name == "hex digest" {
			id, ns = ObservedStatusV1, "user/alice"
		}
		if err := r.Validate(id, ns, doc); err != nil {
			t.Errorf("%s: refused: %v", name, err)
		}
	}

	// Refused: credentials, media, SDP, logs, at any depth, with any line ending.
	keys := pemKeys(t)
	img := pngBase64(t)
	offer := "v=0\r\no=- 4611731400430051336 2 IN IP4 127.0.0.1\r\ns=-\r\nt=0 0\r\nm=video 9 UDP/TLS/RTP/SAVPF 96\r\n"
	refused := map[string]struct {
		params  map[string]any
		mention string
	}{
		"PNG as base64":      {map[string]any{"viewer": map[string]any{"poster": img}}, "encoded binary data"},
		"PNG as data URI":    {map[string]any{"viewer": map[string]any{"poster": "data:image/png;base64," + img[:200]}}, "data URI"},
		"tiny data URI":      {map[string]any{"viewer": map[string]any{"poster": "data:image/gif;base64,R0lGODlhAQABAAAAACw="}}, "data URI"},
		"SDP in nested list": {map[string]any{"gateway": map[string]any{"offers": []any{[]any{1, []any{offer}}}}}, "SDP"},
		"SDP with LF":        {map[string]any{"gateway": map[string]any{"o": []any{strings.ReplaceAll(offer, "\r\n", "\n")}}}, "SDP"},
		"SDP with CR":        {map[string]any{"gateway": map[string]any{"o": []any{strings.ReplaceAll(offer, "\r\n", "\r")}}}, "SDP"},
		"sdp name":           {map[string]any{"gateway": map[string]any{"webrtcSdp": "x"}}, `"sdp"`},
		"x-api-key":          {map[string]any{"gateway": map[string]any{"headers": map[string]any{"x-api-key": "k"}}}, `"api key"`},
		"Authorization":      {map[string]any{"gateway": map[string]any{"headers": []any{map[string]any{"Authorization": "Bearer x"}}}}, `"authorization"`},
		"log of 9 CRLF":      {map[string]any{"viewer": map[string]any{"log": strings.Repeat("12:00:01 frame dropped\r\n", 9)}}, "9 line breaks"},
		"log of 9 CR":        {map[string]any{"viewer": map[string]any{"log": strings.Repeat("frame dropped\r", 9)}}, "9 line breaks"},
	}
	for kind, key := range keys {
		for ending, repl := range map[string]string{"LF": "\n", "CRLF": "\r\n", "CR": "\r", "none": "", "spaces": " "} {
			refused["PEM "+kind+" "+ending] = struct {
				params  map[string]any
				mention string
			}{map[string]any{"svc": map[string]any{"tls": map[string]any{"cert_and_key": []any{strings.ReplaceAll(key, "\n", repl)}}}}, "PEM"}
		}
	}
	for name, c := range refused {
		err := r.Validate(MediaIntentV1, "service/coordinator", intent(c.params))
		wantInvalid(t, err, c.mention)
		if strings.Contains(err.Error(), img[:40]) || strings.Contains(err.Error(), "MHc") {
			t.Errorf("%s: the message repeats the refused content: %v", name, err)
		}
	}

	// SPEC's blob rule counts characters, not meaning: a URL over 1,024 bytes whose other characters
	// (".", ":", "?", "&") are under a tenth of it is refused like a blob.
	longURL := "https://cdn.example.com/" + strings.Repeat("posters/front-door-720p.jpg?v=2&", 40)
	wantInvalid(t, Guard(mustJSON(t, map[string]any{"poster": longURL})), "encoded binary data")

	// SPEC judges each string by itself: a blob cut into pieces of at most 1,024 bytes, across strings of
	// an array or properties, is no string over 1,024 bytes, and passes (as does a key's base64 body
	// without its PEM lines, when it is short and on few lines).
	var pieces []any
	for rest := img; rest != ""; {
		n := min(len(rest), blobMinBytes)
		pieces = append(pieces, rest[:n])
		rest = rest[n:]
	}
	if err := Guard(mustJSON(t, map[string]any{"poster": pieces})); err != nil {
		t.Errorf("pieces of at most 1,024 bytes are refused: %v", err)
	}
	body := strings.Join(strings.Split(strings.TrimSpace(keys["EC"]), "\n")[1:4], "")
	if err := Guard(mustJSON(t, map[string]any{"k": body})); err != nil {
		t.Errorf("a short base64 body without PEM lines is refused: %v", err)
	}
}
