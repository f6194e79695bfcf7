-- Quantities and groups (issue 41): an order holds 1-100 units; a sale allows each buyer
-- `per_buyer` units (null: 1), in the sale or across its group's sales. A group's sales are named
-- `<group>.<name>` (src/domain.rs), so the id may now hold one '.'.
alter table orders
    add column quantity integer not null default 1 check (quantity between 1 and 100);

alter table sales
    add column per_buyer integer check (per_buyer between 1 and 100),
    drop constraint sales_sale_id_check,
    add constraint sales_sale_id_check
        check (sale_id ~ '^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)?$' and length(sale_id) <= 64);
