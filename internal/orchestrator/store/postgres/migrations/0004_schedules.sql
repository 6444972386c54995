-- Schedules of drift checks (api.Schedule) and the drift marks of state keys (api.Drift, id
-- "<storage>/<state key>", a row only while the key is drifted). The sweep reads every
-- schedule in a snapshot and fires each due one in a transaction of its own.
CREATE TABLE schedules (
	org text NOT NULL,
	id  text NOT NULL,
	doc json NOT NULL,
	PRIMARY KEY (org, id)
);

CREATE TABLE drifts (
	org text NOT NULL,
	id  text NOT NULL,
	doc json NOT NULL,
	PRIMARY KEY (org, id)
);
