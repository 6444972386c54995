package accesslog

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestRecorder(t *testing.T) {
	w := httptest.NewRecorder()
	r := &Recorder{ResponseWriter: w}
	_, _ = r.Write([]byte("hello"))
	r.WriteHeader(http.StatusTeapot) // too late: the first status stands
	_, _ = r.Write([]byte(", world"))
	if r.Status != http.StatusOK || r.Bytes != 12 || w.Body.String() != "hello, world" {
		t.Fatalf("status %d, %d bytes, body %q", r.Status, r.Bytes, w.Body.String())
	}
	if http.NewResponseController(r).Flush() != nil || !w.Flushed {
		t.Fatal("a flush does not reach the writer underneath (Unwrap)")
	}
	r = &Recorder{ResponseWriter: httptest.NewRecorder()}
	r.WriteHeader(http.StatusNotFound)
	if r.Status != http.StatusNotFound || r.Bytes != 0 {
		t.Fatalf("status %d, %d bytes", r.Status, r.Bytes)
	}
}
