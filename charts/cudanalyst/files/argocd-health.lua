-- Argo CD health check for cudanalyst.dev/AttributionRun and cudanalyst.dev/TrajectoryRecording, from their
-- kstatus conditions (both kinds write the same ones).
-- Ready -> Healthy; Stalled or Failed -> Degraded; Suspended -> Suspended; otherwise Progressing.
local hs = {status = "Progressing", message = "Waiting for the operator"}
if obj.status == nil or obj.status.conditions == nil then
  return hs
end
if obj.status.observedGeneration ~= nil and obj.metadata.generation ~= nil
    and obj.status.observedGeneration < obj.metadata.generation then
  hs.message = "Waiting for the operator to observe the latest spec"
  return hs
end
local found = {}
for _, condition in ipairs(obj.status.conditions) do
  found[condition.type] = condition
end
local function is_true(kind)
  return found[kind] ~= nil and found[kind].status == "True"
end
local function say(kind, fallback)
  local c = found[kind]
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end
if is_true("Ready") then
  hs.status = "Healthy"
  hs.message = say("Ready", "Succeeded")
elseif is_true("Stalled") or is_true("Failed") then
  hs.status = "Degraded"
  hs.message = say("Stalled", say("Failed", "Failed"))
elseif is_true("Suspended") then
  hs.status = "Suspended"
  hs.message = say("Suspended", "Suspended")
else
  hs.status = "Progressing"
  hs.message = say("Reconciling", "Progressing")
end
return hs
