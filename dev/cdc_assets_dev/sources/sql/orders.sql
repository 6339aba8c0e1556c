-- shop.public.orders on PostgreSQL (spec table_specs/orders.yaml). Run in database `shop`.
CREATE TABLE public.orders (
  order_id bigint NOT NULL,
  user_id bigint NOT NULL,
  status varchar(20) NOT NULL,
  amount numeric(12,2) NOT NULL,
  tax numeric(12,2),
  currency char(3) NOT NULL,
  discount_rate numeric(5,4),
  placed_at timestamptz NOT NULL,
  shipped_at timestamp,
  delivery_date date,
  note text,
  PRIMARY KEY (order_id)
);
