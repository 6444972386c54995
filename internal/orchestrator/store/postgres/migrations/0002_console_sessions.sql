-- The web console's sessions (store.SessionRecord), so every replica serves every signed-in
-- browser. id is the SHA-256 of the session cookie (hex); the cookie itself is never kept. org is
-- the scope store.SessionScope for all of them (the session's organisation is in the document).
CREATE TABLE console_sessions (
	org text NOT NULL,
	id  text NOT NULL,
	doc json NOT NULL,
	PRIMARY KEY (org, id)
);
