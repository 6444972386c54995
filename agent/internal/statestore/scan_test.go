package statestore

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// scanVerdict is whether the scanner takes doc as one JSON object.
func scanVerdict(doc []byte) bool {
	sc := newStateScanner()
	_, _ = sc.Write(doc)
	_, err := sc.Finish()
	return err == nil
}

// jsonVerdict is the same question answered by encoding/json.
func jsonVerdict(doc []byte) bool {
	return json.Valid(doc) && bytes.HasPrefix(bytes.TrimLeft(doc, " \t\r\n"), []byte("{"))
}

var scanCorpus = []string{
	`{}`, ` { } `, `{"a":1}`, `{"a":[]}`, `{"a":[1,2,{"b":null}]}`, `{"a":"x\"y\\z\u00e9\n"}`,
	`{"a":-0.5e+10}`, `{"a":0}`, `{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":-}`, `{"a":1e}`, `{"a":1E-3}`,
	`{"a":[1,]}`, `{"a":1,}`, `{,}`, `{"a" 1}`, `{"a":tru}`, `{"a":true}`, `{"a":false,"b":null}`,
	`[1]`, `"x"`, `1`, ``, `{`, `{"a":"unterminated}`, `{"a":1}{}`, `{"a":1} x`, `{"a":"\x"}`,
	`{"a":"\u12G4"}`, "{\"a\":\"\x01\"}", `{"a":{"b":{"c":[[],[{}]]}}}`, `{"a":[,1]}`, `{"a":nul}`,
	`{"version":4,"serial":1,"lineage":"l","resources":[{"instances":[{"attributes":{"x":"y"}}]}]}`,
}

func TestScannerAgreesWithEncodingJSON(t *testing.T) {
	for _, doc := range scanCorpus {
		if got, want := scanVerdict([]byte(doc)), jsonVerdict([]byte(doc)); got != want {
			t.Errorf("%q: scanner says %v, encoding/json %v", doc, got, want)
		}
	}
}

// FuzzStateScanner: on any input, the scanner accepts exactly the JSON objects.
func FuzzStateScanner(f *testing.F) {
	for _, doc := range scanCorpus {
		f.Add([]byte(doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		if got, want := scanVerdict(doc), jsonVerdict(doc); got != want {
			t.Fatalf("%q: scanner says %v, encoding/json %v", doc, got, want)
		}
	})
}

// The scanner keeps only what ParseState reads, bounded, whatever the body holds.
func TestScannerMemoryIsBounded(t *testing.T) {
	huge := `{"version":4,"serial":3,"lineage":"l","resources":[{"blob":"` + strings.Repeat("A", 8<<20) + `"}],"encrypted_data":"` + strings.Repeat("B", 1<<20) + `"}`
	sc := newStateScanner()
	for b := []byte(huge); len(b) > 0; b = b[min(len(b), 4096):] {
		if _, err := sc.Write(b[:min(len(b), 4096)]); err != nil {
			t.Fatal(err)
		}
	}
	m, err := sc.Finish()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, v := range m {
		total += len(v)
	}
	if total > 6*maxCaptured || cap(sc.keyBuf) > 1024 || cap(sc.stack) > 64 {
		t.Errorf("the scanner kept %d bytes of members, key buffer %d, stack %d", total, cap(sc.keyBuf), cap(sc.stack))
	}
	meta, err := sc.meta()
	if err != nil || meta.Serial != 3 || meta.Lineage != "l" {
		t.Errorf("meta = %+v, %v", meta, err)
	}
}
