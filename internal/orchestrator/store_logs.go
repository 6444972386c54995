package orchestrator

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// truncationMarker is the line that ends a log cut at the cap; it is written once, so a reader
// can always tell a truncated log from a complete one.
func truncationMarker(limit int64) string {
	return fmt.Sprintf("[outpost: log truncated at %d bytes]\n", limit)
}

func logKey(rec *deploymentRecord, stored int64) []byte {
	return append(prefix(rec.Org, rec.D.ID), u64(uint64(stored))...)
}

// putChunk stores b at the end of the stored log.
func putChunk(tx *bolt.Tx, rec *deploymentRecord, b []byte) error {
	if err := tx.Bucket(bLogs).Put(logKey(rec, rec.D.LogSize), b); err != nil {
		return err
	}
	rec.D.LogSize += int64(len(b))
	return nil
}

// lastStoredByte returns the last byte of the stored log (0 when empty).
func lastStoredByte(tx *bolt.Tx, rec *deploymentRecord) byte {
	var last byte
	_ = scanPrefixReverse(tx.Bucket(bLogs), prefix(rec.Org, rec.D.ID), func(_, v []byte) (bool, error) {
		if len(v) > 0 {
			last = v[len(v)-1]
		}
		return false, nil
	})
	return last
}

// appendCapped stores b, keeping at most limit bytes per deployment. The first byte that does not
// fit ends the log with the truncation marker; later bytes are dropped (the caller still counts
// them in the writer's offset).
func appendCapped(tx *bolt.Tx, rec *deploymentRecord, b []byte, limit int64) error {
	if rec.D.LogTruncated || len(b) == 0 {
		return nil
	}
	room := max(limit-rec.D.LogSize, 0)
	keep := b[:min(int64(len(b)), room)]
	if len(keep) > 0 {
		if err := putChunk(tx, rec, bytes.Clone(keep)); err != nil {
			return err
		}
	}
	if len(keep) == len(b) {
		return nil
	}
	marker := truncationMarker(limit)
	var last byte
	if len(keep) > 0 {
		last = keep[len(keep)-1]
	} else {
		last = lastStoredByte(tx, rec)
	}
	if rec.D.LogSize > 0 && last != '\n' {
		marker = "\n" + marker
	}
	rec.D.LogTruncated = true
	return putChunk(tx, rec, []byte(marker))
}

// appendLog appends log bytes of a deployment's attempt at the writer's offset. Offsets count what
// the writer sent in the current grant; a resend of committed bytes is acknowledged without change,
// a partial resend keeps only the new tail, and a gap is refused with the committed offset.
func (s *store) appendLog(ctx context.Context, c jobTokenPayload, offset int64, data []byte, grace time.Duration) (*api.LogAppendResponse, error) {
	var out api.LogAppendResponse
	err := s.update(ctx, func(tx *bolt.Tx) error {
		rec, err := s.grantedDeployment(tx, c, grace)
		if err != nil {
			return err
		}
		committed := rec.LogCommitted
		switch end := offset + int64(len(data)); {
		case offset > committed:
			return offsetMismatch(committed, offset)
		case end > committed:
			if err := appendCapped(tx, rec, data[committed-offset:], s.logCap); err != nil {
				return err
			}
			rec.LogCommitted = end
			if err := saveDeployment(tx, rec); err != nil {
				return err
			}
		}
		out = api.LogAppendResponse{CommittedOffset: rec.LogCommitted, Truncated: rec.D.LogTruncated, CancelRequested: rec.D.CancelRequested}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &out, nil
}

// readLogs returns up to limit stored bytes from offset.
func (s *store) readLogs(ctx context.Context, org, id string, offset, limit int64) (*api.LogChunk, error) {
	out := &api.LogChunk{Offset: offset, Data: []byte{}}
	err := s.view(ctx, func(tx *bolt.Tx) error {
		rec, err := loadDeployment(tx, org, id)
		if err != nil {
			return err
		}
		if offset > rec.D.LogSize {
			return invalid("offset", "%d is beyond the end of the log (%d bytes stored)", offset, rec.D.LogSize)
		}
		p := prefix(org, id)
		c := tx.Bucket(bLogs).Cursor()
		k, v := c.Seek(logKey(rec, offset))
		switch {
		case k == nil:
			k, v = c.Last()
		case !bytes.HasPrefix(k, p) || chunkStart(k, p) > offset:
			k, v = c.Prev()
		}
		for ; k != nil && bytes.HasPrefix(k, p) && int64(len(out.Data)) < limit; k, v = c.Next() {
			start := chunkStart(k, p)
			if start+int64(len(v)) <= offset {
				continue
			}
			from := max(offset-start, 0)
			take := min(int64(len(v))-from, limit-int64(len(out.Data)))
			out.Data = append(out.Data, v[from:from+take]...)
		}
		out.NextOffset = offset + int64(len(out.Data))
		out.Truncated = rec.D.LogTruncated
		out.Complete = rec.D.Status.Terminal() && out.NextOffset == rec.D.LogSize
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func chunkStart(k, p []byte) int64 {
	if len(k) != len(p)+8 {
		return -1
	}
	return int64(binary.BigEndian.Uint64(k[len(p):]))
}
