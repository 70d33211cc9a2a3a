package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/keeppeek/coordination/store/wire"
)

// writeJSON prints v as one line of JSON. Documents keep their bytes: no HTML escaping of <, > and &,
// so what is printed is what the server stored (and what the audit log's document_sha256 hashes).
func writeJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // one line, newline included
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

// formatTime renders Unix milliseconds as UTC RFC 3339 with milliseconds.
func formatTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

func formatTTL(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return (time.Duration(ms) * time.Millisecond).String()
}

// writeEntry prints an entry's fields, one per line, and its document pretty-printed.
func writeEntry(w io.Writer, e wire.Entry, withDocument bool) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, row := range [][2]string{
		{"NAMESPACE", e.Namespace},
		{"KEY", e.Key},
		{"SCHEMA", e.Schema},
		{"OWNER", e.Owner},
		{"REVISION", fmt.Sprint(e.Revision)},
		{"CREATED", formatTime(e.CreatedAtMs)},
		{"UPDATED", formatTime(e.UpdatedAtMs)},
		{"TTL", formatTTL(e.TTLMs)},
		{"EXPIRES", formatTime(e.ExpiresAtMs)},
		{"SIZE", fmt.Sprint(len(e.Document))},
	} {
		fmt.Fprintf(tw, "%s\t%s\n", row[0], row[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !withDocument {
		return nil
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, e.Document, "", "  "); err != nil {
		pretty.Reset()
		pretty.Write(e.Document)
	}
	_, err := fmt.Fprintf(w, "DOCUMENT\n%s\n", pretty.Bytes())
	return err
}

// writeEntryTable prints entries as a table: KEY, REVISION, SCHEMA, OWNER, EXPIRES, SIZE.
func writeEntryTable(w io.Writer, entries []wire.Entry) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tREVISION\tSCHEMA\tOWNER\tEXPIRES\tSIZE")
	for _, e := range entries {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%d\n", e.Key, e.Revision, e.Schema, e.Owner, formatTime(e.ExpiresAtMs), len(e.Document))
	}
	return tw.Flush()
}

// writeInfo prints the server's info, its bounds by their wire names.
func writeInfo(w io.Writer, info wire.Info) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	features := strings.Join(info.Features, ", ")
	if features == "" {
		features = "none (the state store is not served)"
	}
	fmt.Fprintf(tw, "SERVER ID\t%s\nVERSION\t%s\nEPOCH\t%s\nFEATURES\t%s\nBOUNDS\t\n", info.ServerID, info.Version, info.Epoch, features)
	v := reflect.ValueOf(info.Bounds)
	for i := range v.NumField() {
		name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		fmt.Fprintf(tw, "  %s\t%d\n", name, v.Field(i).Int())
	}
	return tw.Flush()
}
