-- State operations (api.StateOperation): show, diff and rollback of the versions an agent keeps
-- of a state, asked for on the admin side and run by the agent; their results are names only.
-- id is "sop-…". state_operation_queues lists, per state storage (id = storage id), the
-- operations that have not ended, so a poll finds them with one read.
CREATE TABLE state_operations (
	org text NOT NULL,
	id  text NOT NULL,
	doc json NOT NULL,
	PRIMARY KEY (org, id)
);
CREATE TABLE state_operation_queues (
	org text NOT NULL,
	id  text NOT NULL,
	doc json NOT NULL,
	PRIMARY KEY (org, id)
);
