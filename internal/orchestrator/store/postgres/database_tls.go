package postgres

import (
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// ErrDatabaseTLS is a database URL that would reach PostgreSQL across the network without
// verified TLS; see CheckDatabaseTLS.
var ErrDatabaseTLS = errors.New("database URL without verified TLS")

// CheckDatabaseTLS refuses a PostgreSQL connection config that would reach a server off
// loopback without verified TLS: the database holds every organisation's sources, variables,
// logs and outputs (and, without --signing-secret-file, the secret that signs job tokens), and
// the connection carries the password. pgx's default sslmode=prefer falls back to plain text
// without a word, and sslmode=require and verify-ca do not check that the certificate names the
// server, so only sslmode=verify-full passes, unless allowInsecure (the opt-in by name, optIn)
// says the network is trusted. Loopback hosts and Unix sockets need no TLS. The error never
// repeats the URL, which can hold a password.
func CheckDatabaseTLS(cfg *pgconn.Config, allowInsecure bool, optIn string) error {
	if allowInsecure {
		return nil
	}
	tries := append([]*pgconn.FallbackConfig{{Host: cfg.Host, Port: cfg.Port, TLSConfig: cfg.TLSConfig}}, cfg.Fallbacks...)
	for _, f := range tries {
		if databaseHostIsLocal(f.Host) {
			continue
		}
		if f.TLSConfig == nil || f.TLSConfig.InsecureSkipVerify {
			return fmt.Errorf("%w: the connection to PostgreSQL at %s would not verify the server's certificate (sslmode is not verify-full; "+
				"pgx's default, prefer, even falls back to plain text), so the password and everything the orchestrator stores could be read "+
				"or changed on the way; add sslmode=verify-full (with sslrootcert=<CA file> unless the system trusts the server's CA), "+
				"or set %s if this network is trusted and you accept that", ErrDatabaseTLS, net.JoinHostPort(f.Host, fmt.Sprint(f.Port)), optIn)
		}
	}
	return nil
}

// databaseHostIsLocal: a Unix socket directory, localhost, or a loopback address.
func databaseHostIsLocal(host string) bool {
	if strings.HasPrefix(host, "/") || strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
