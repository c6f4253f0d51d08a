DROP TABLE webhook_dispatch;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_subscriptions;
DROP TABLE event_feed;
DROP TABLE event_positions;
ALTER TABLE audit_events DROP COLUMN event_type;
