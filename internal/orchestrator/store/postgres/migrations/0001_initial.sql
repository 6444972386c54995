-- The orchestrator's records in PostgreSQL. Objects the API returns whole are kept as the JSON
-- the orchestrator writes (column doc or record); what queries select or order by is in columns
-- of their own, derived from the record on every write. Times queries compare are Unix
-- nanoseconds, exactly the values the orchestrator compares in Go.

CREATE TABLE meta (
	name  text PRIMARY KEY,
	value bytea NOT NULL
);

CREATE TABLE orgs (
	org        text PRIMARY KEY,
	created_at timestamptz NOT NULL
);

CREATE TABLE runners (
	org text NOT NULL,
	id  text NOT NULL,
	doc json NOT NULL,
	PRIMARY KEY (org, id)
);

CREATE TABLE state_storages (
	org text NOT NULL,
	id  text NOT NULL,
	doc json NOT NULL,
	PRIMARY KEY (org, id)
);

-- Only the SHA-256 of a token is kept.
CREATE TABLE org_tokens (
	org  text NOT NULL,
	id   text NOT NULL,
	hash bytea NOT NULL UNIQUE,
	doc  json NOT NULL,
	PRIMARY KEY (org, id)
);

CREATE SEQUENCE deployment_seq;

CREATE TABLE deployments (
	org              text NOT NULL,
	id               text NOT NULL,
	seq              bigint NOT NULL,
	runner_id        text NOT NULL,
	status           text NOT NULL,
	-- Set exactly while the deployment holds a job lease.
	lease_expires_ns bigint,
	-- Set once the deployment has ended.
	finished_ns      bigint,
	source_purged    boolean NOT NULL DEFAULT false,
	logs_purged      boolean NOT NULL DEFAULT false,
	record           json NOT NULL,
	PRIMARY KEY (org, id)
);

CREATE INDEX deployments_list ON deployments (org, seq);
CREATE INDEX deployments_queue ON deployments (org, runner_id, seq) WHERE status = 'queued';
CREATE INDEX deployments_leased ON deployments (org, runner_id) WHERE lease_expires_ns IS NOT NULL;
CREATE INDEX deployments_lease_expiry ON deployments (lease_expires_ns) WHERE lease_expires_ns IS NOT NULL;
CREATE INDEX deployments_ended ON deployments (finished_ns) WHERE finished_ns IS NOT NULL;

-- The source is written just before its deployment in the same transaction, hence deferred.
CREATE TABLE sources (
	org text NOT NULL,
	id  text NOT NULL,
	doc json NOT NULL,
	PRIMARY KEY (org, id),
	FOREIGN KEY (org, id) REFERENCES deployments ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED
);

CREATE TABLE outputs (
	org text NOT NULL,
	id  text NOT NULL,
	doc json NOT NULL,
	PRIMARY KEY (org, id),
	FOREIGN KEY (org, id) REFERENCES deployments ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED
);

CREATE TABLE events (
	org           text NOT NULL,
	deployment_id text NOT NULL,
	attempt       integer NOT NULL,
	seq           bigint NOT NULL,
	doc           json NOT NULL,
	PRIMARY KEY (org, deployment_id, attempt, seq),
	FOREIGN KEY (org, deployment_id) REFERENCES deployments ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED
);

-- One row per append; start is the stored offset of its first byte.
CREATE TABLE logs (
	org           text NOT NULL,
	deployment_id text NOT NULL,
	start         bigint NOT NULL,
	data          bytea NOT NULL,
	PRIMARY KEY (org, deployment_id, start),
	FOREIGN KEY (org, deployment_id) REFERENCES deployments ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED
);

-- Agent token ids already seen, until their tokens expire.
CREATE TABLE replay (
	token_id   text PRIMARY KEY,
	expires_ns bigint NOT NULL
);

CREATE INDEX replay_expiry ON replay (expires_ns);
