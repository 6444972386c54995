// Package statestore keeps Terraform/OpenTofu state in Kubernetes Secrets and locks it with
// Kubernetes Leases. It is the storage half of the agent's state service; package statebackend
// serves it to job pods over the Terraform/OpenTofu `http` backend protocol.
//
// It exists because the stock `kubernetes` backend of both CLIs falls short in ways that matter
// for unattended runs (see the runtime anchor report, §1): writes of chunked states are not
// atomic (a crash leaves a mix of old and new chunks), nothing checks that what is read is what
// was written, OpenTofu cannot store more than one Secret (≈1 MiB), locks never expire (a killed
// run leaves the state locked until a human intervenes), names must be DNS-1123 (workspaces with
// capitals or underscores fail), and every runner needs list access to all Secrets of the
// namespace. This package fixes each of those:
//
// Layout. A state is identified by an arbitrary key string (for example "team-a/prod/network")
// within a scope, the organisation (Options.Scope). Object names derive from a hash of the scope
// and the key, so any key works and two organisations can share a namespace without their states
// ever meeting; the raw key is kept in the annotation outpost.dev/state-key and the scope in the
// label outpost.dev/org-id. States written before scoping stay readable and move to their scoped
// names on their next write.
//
//	tfstate-<hash>                  manifest Secret: which generation is current, its SHA-256,
//	                                size, chunk count, encoding, serial/lineage and the history
//	tfstate-<hash>-g<gen>-<i>       chunk Secrets (immutable), ≤ 900 KiB of the gzip stream each
//	tflock-<hash>                   Lease: the lock, with holder, duration and renew time
//
// Writes. A write streams: the body is checked (one JSON object with the members of a state),
// hashed, compressed and cut into chunks as it arrives, and each chunk is created as soon as it
// is known not to be the last, a few at a time, so a write needs memory for a few chunks whatever
// the size of the state. It lays down every chunk of a new generation first (chunk 0 is created
// first and claims the generation number, so two writers never share chunk objects), then swaps the
// manifest with a resourceVersion compare-and-swap, then garbage-collects chunks of generations
// that are older than the current one and no longer in the kept history (default 10 versions,
// and optionally none older than a maximum age). A crash at
// any point before the swap leaves the previous generation current and readable; chunks of the
// failed attempt are orphans that the next successful write deletes. Garbage collection deletes
// only generations below the one just committed, so it never touches a concurrent writer's
// in-flight chunks unless that writer's compare-and-swap is already doomed to fail.
//
// Reads. A read fetches the manifest, then streams the chunks it names in order (a few ahead),
// decompressing as it goes, and verifies the SHA-256 and size of the decompressed state at the
// end (Stream; a caller that already passed bytes on must treat a late error as a broken
// stream). A missing or damaged chunk, or a manifest that names a deleted generation, yields a
// *CorruptError (errors.Is(err, ErrCorrupt)) naming the state key, the generation and the chunk;
// the read retries once from a fresh manifest first, so a reader that raced a writer's garbage
// collection is not reported as corruption.
//
// Locks. A Lease per state holds the lock: holderIdentity is the holder (the deployment id and
// attempt in the agent), the annotation outpost.dev/lock-info holds the Terraform lock info JSON,
// and leaseDurationSeconds/renewTime make the lock expire unless it is renewed. An expired lock can
// be taken over; a holder whose lock was force-unlocked or taken over can no longer write (its lock
// ID no longer matches), which fences out zombie writers. A lock is bound to its holder too: a
// write or an unlock that names the holder (WriteOptions.Holder) needs both the lock ID and the
// holder to match, so a lock ID learned from someone else's lock opens nothing.
//
// Required RBAC in the state namespace: secrets get, list, create, update, delete,
// deletecollection; leases get, list, create, update, delete. Only the agent needs them; job pods
// talk HTTP to the agent and need no Secret access at all.
package statestore
