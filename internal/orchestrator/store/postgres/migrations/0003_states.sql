-- What agents report of the states of kubernetes state storages: per state key, the kept
-- versions' metadata and the lock holder (api.State). Never a state's contents. id is
-- "<storage>/<state key>".
CREATE TABLE states (
	org text NOT NULL,
	id  text NOT NULL,
	doc json NOT NULL,
	PRIMARY KEY (org, id)
);
