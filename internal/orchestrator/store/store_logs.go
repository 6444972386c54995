package store

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/outpost-dev/terraform-provider-outpost/internal/api"
)

// TruncationMarker is the line that ends a log cut at the cap; it is written once, so a reader
// can always tell a truncated log from a complete one.
func TruncationMarker(limit int64) string {
	return fmt.Sprintf("[outpost: log truncated at %d bytes]\n", limit)
}

// putChunk stores b at the end of the stored log.
func putChunk(tx Tx, rec *DeploymentRecord, b []byte) error {
	if err := tx.PutLogChunk(rec.Org, rec.D.ID, rec.D.LogSize, b); err != nil {
		return err
	}
	rec.D.LogSize += int64(len(b))
	return nil
}

// appendCapped stores b, keeping at most limit bytes per deployment. The first byte that does not
// fit ends the log with the truncation marker; later bytes are dropped (the caller still counts
// them in the writer's offset).
func appendCapped(tx Tx, rec *DeploymentRecord, b []byte, limit int64) error {
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
	marker := TruncationMarker(limit)
	var last byte
	if len(keep) > 0 {
		last = keep[len(keep)-1]
	} else {
		var err error
		if last, err = tx.LastLogByte(rec.Org, rec.D.ID); err != nil {
			return err
		}
	}
	if rec.D.LogSize > 0 && last != '\n' {
		marker = "\n" + marker
	}
	rec.D.LogTruncated = true
	return putChunk(tx, rec, []byte(marker))
}

// AppendLog appends log bytes of a deployment's attempt at the writer's offset. Offsets count what
// the writer sent in the current grant; a resend of committed bytes is acknowledged without change,
// a partial resend keeps only the new tail, and a gap is refused with the committed offset.
func (s *Store) AppendLog(ctx context.Context, c JobTokenPayload, offset int64, data []byte, grace time.Duration) (*api.LogAppendResponse, error) {
	var out api.LogAppendResponse
	err := s.Update(ctx, func(tx Tx) error {
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
			if err := tx.SaveDeployment(rec); err != nil {
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

// ReadLogs returns up to limit stored bytes from offset.
func (s *Store) ReadLogs(ctx context.Context, org, id string, offset, limit int64) (*api.LogChunk, error) {
	out := &api.LogChunk{Offset: offset, Data: []byte{}}
	err := s.view(ctx, func(tx Tx) error {
		rec, err := loadDeployment(tx, org, id)
		if err != nil {
			return err
		}
		if offset > rec.D.LogSize {
			return Invalid("offset", "%d is beyond the end of the log (%d bytes stored)", offset, rec.D.LogSize)
		}
		if out.Data, err = tx.ReadLog(org, id, offset, limit); err != nil {
			return err
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
