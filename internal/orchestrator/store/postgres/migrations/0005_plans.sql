-- Saved plans (api.SavedPlan): per plan deployment, the summary of what the plan changes (names
-- only, never a value) and its review (approved, discarded, applied by which deployment). The
-- plan file itself stays in the cluster, with the state. id is the plan deployment's id.
CREATE TABLE plans (
	org text NOT NULL,
	id  text NOT NULL,
	doc json NOT NULL,
	PRIMARY KEY (org, id),
	FOREIGN KEY (org, id) REFERENCES deployments ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED
);
