-- app.users on MariaDB (spec table_specs/users.yaml). Run in database `app` by the local stack.
CREATE TABLE users (
  id BIGINT NOT NULL COMMENT 'surrogate key',
  email VARCHAR(255) NOT NULL,
  display_name VARCHAR(100),
  country CHAR(2),
  is_active BOOLEAN NOT NULL DEFAULT 1,
  login_count INT NOT NULL DEFAULT 0,
  created_ms BIGINT NOT NULL COMMENT 'creation time as epoch milliseconds',
  updated_at DATETIME(3),
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
