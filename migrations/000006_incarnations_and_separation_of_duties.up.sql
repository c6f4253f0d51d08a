-- Incarnations: a department, team or virtual cluster id may be used again
-- once the object is gone; uid tells the incarnations apart. History (audit
-- events, a team's REJECTED and DELETED virtual clusters) belongs to the
-- incarnation it was written for and never to a later one with the same id.

ALTER TABLE departments ADD COLUMN uid uuid NOT NULL DEFAULT gen_random_uuid();
ALTER TABLE departments ADD CONSTRAINT departments_uid_key UNIQUE (uid);
ALTER TABLE teams ADD COLUMN uid uuid NOT NULL DEFAULT gen_random_uuid();
ALTER TABLE teams ADD CONSTRAINT teams_uid_key UNIQUE (uid);

-- Virtual clusters: uid is the key; the id is unique among the ones that
-- are not gone (virtualcluster.Phase.IsGone: DELETED, REJECTED), so taking
-- a gone name keeps the old row, with its team.
ALTER TABLE virtual_clusters ADD COLUMN uid uuid NOT NULL DEFAULT gen_random_uuid();
ALTER TABLE reconcile_work DROP CONSTRAINT reconcile_work_virtual_cluster_id_fkey;
ALTER TABLE virtual_clusters DROP CONSTRAINT virtual_clusters_pkey;
ALTER TABLE virtual_clusters ADD CONSTRAINT virtual_clusters_pkey PRIMARY KEY (uid);
CREATE UNIQUE INDEX virtual_clusters_live_id ON virtual_clusters (id) WHERE phase NOT IN ('DELETED', 'REJECTED');
-- Lists page by (id, team_id) and keep each team's newest incarnation of
-- an id; the current incarnation of an id is looked up by id.
CREATE INDEX virtual_clusters_id_team ON virtual_clusters (id, team_id, create_time);
-- Work items name a virtual cluster id, which is its one incarnation that
-- is not gone; a work item whose virtual cluster went away is finished by
-- the worker (nothing to converge).

-- Audit events record the incarnations they were written for. Reads by
-- team members and department admins are scoped by uid, so a new team (or
-- department) that takes a deleted one's id does not inherit its history.
ALTER TABLE audit_events
  ADD COLUMN department_uid uuid,
  ADD COLUMN team_uid       uuid,
  ADD COLUMN resource_uid   uuid;
-- Existing events belong to the current incarnation when they were written
-- after it was created; older ones (a deleted namesake's) to none, so only
-- platform admins read them.
UPDATE audit_events a SET department_uid = d.uid
  FROM departments d WHERE d.id = a.department_id AND a.time >= d.create_time;
UPDATE audit_events a SET team_uid = t.uid
  FROM teams t WHERE t.id = a.team_id AND a.time >= t.create_time;
UPDATE audit_events a SET resource_uid = CASE
    WHEN a.resource = 'teams/' || a.team_id THEN a.team_uid
    WHEN a.team_id = '' AND a.resource = 'departments/' || a.department_id THEN a.department_uid
  END
  WHERE a.resource = 'teams/' || a.team_id OR (a.team_id = '' AND a.resource = 'departments/' || a.department_id);
UPDATE audit_events a SET resource_uid = v.uid
  FROM virtual_clusters v
  WHERE a.resource = 'teams/' || v.team_id || '/virtualClusters/' || v.id AND a.time >= v.create_time;
CREATE INDEX audit_events_team_uid ON audit_events (team_uid, id DESC);
CREATE INDEX audit_events_department_uid ON audit_events (department_uid, id DESC);
CREATE INDEX audit_events_resource_uid ON audit_events (resource_uid, id DESC) WHERE resource_uid IS NOT NULL;

-- Separation of duties, per department (on by default): the requester of a
-- request may not approve or reject it; platform admins may override, and
-- the audit log says so.
ALTER TABLE departments ADD COLUMN requester_cannot_decide boolean NOT NULL DEFAULT true;
