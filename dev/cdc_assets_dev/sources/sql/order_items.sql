-- shop.order_items on MariaDB (spec table_specs/order_items.yaml). Run in database `shop`.
CREATE TABLE order_items (
  order_id BIGINT NOT NULL,
  line_no SMALLINT NOT NULL,
  sku VARCHAR(64) NOT NULL,
  quantity INT UNSIGNED NOT NULL,
  unit_price DECIMAL(10,2) NOT NULL,
  attributes JSON,
  added_at TIMESTAMP(6) NOT NULL,
  PRIMARY KEY (order_id, line_no)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;
