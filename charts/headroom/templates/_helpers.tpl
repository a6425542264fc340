{{/*
Chart name, truncated to 63 characters (a DNS-1123 label).
*/}}
{{- define "headroom.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: <release>-<name>, or the release name when it already contains
the chart name; fullnameOverride wins.
*/}}
{{- define "headroom.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Namespace of the namespaced objects.
*/}}
{{- define "headroom.namespace" -}}
{{- default .Release.Namespace .Values.namespaceOverride }}
{{- end }}

{{/*
chart label value: <name>-<version>.
*/}}
{{- define "headroom.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: stable across upgrades (a DaemonSet's selector is immutable).
*/}}
{{- define "headroom.selectorLabels" -}}
app.kubernetes.io/name: {{ include "headroom.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Common labels of every object.
*/}}
{{- define "headroom.labels" -}}
helm.sh/chart: {{ include "headroom.chart" . }}
{{ include "headroom.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/component: exporter
app.kubernetes.io/part-of: headroom
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
ServiceAccount name.
*/}}
{{- define "headroom.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "headroom.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Image reference: registry/repository, then @digest or :tag (default: appVersion).
*/}}
{{- define "headroom.image" -}}
{{- $repo := .Values.image.repository }}
{{- if .Values.image.registry }}
{{- $repo = printf "%s/%s" .Values.image.registry .Values.image.repository }}
{{- end }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" $repo .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" $repo (.Values.image.tag | default .Chart.AppVersion) }}
{{- end }}
{{- end }}

{{/*
Trailing window of headroom_memory_peak_bytes: the scrape interval unless set.
*/}}
{{- define "headroom.samplerWindow" -}}
{{- default .Values.monitor.interval .Values.exporter.sampler.window }}
{{- end }}

{{/*
Container paths of the host mounts (the exporter's --path.* flags point here).
*/}}
{{- define "headroom.procfsMount" -}}/host/proc{{- end }}
{{- define "headroom.cgroupfsMount" -}}/host/sys/fs/cgroup{{- end }}
{{- define "headroom.kmsgMount" -}}/host/dev/kmsg{{- end }}

{{/*
Arguments of `headroom serve`, as a YAML list (toYaml quotes what needs quoting).
*/}}
{{- define "headroom.args" -}}
{{- $e := .Values.exporter }}
{{- $args := list "serve" (printf "--web.listen-address=:%v" $e.port) }}
{{- $args = append $args (printf "--path.procfs=%s" (include "headroom.procfsMount" .)) }}
{{- $args = append $args (printf "--path.cgroupfs=%s" (include "headroom.cgroupfsMount" .)) }}
{{- if .Values.kmsg.enabled }}
{{- $args = append $args (printf "--path.kmsg=%s" (include "headroom.kmsgMount" .)) }}
{{- end }}
{{- /* Collectors and their settings, in the registry's order (files/sources.yaml is
written by `headroom generate` from exporter/assembly/registry.py). */}}
{{- $sources := (.Files.Get "files/sources.yaml" | fromYaml).sources }}
{{- range $src := $sources }}
{{- $args = append $args (printf "--%scollector.%s" (ternary "" "no-" (index $e.collectors $src.name)) $src.name) }}
{{- end }}
{{- if .Values.kubernetes.enabled }}
{{- $args = append $args "--collector.kubernetes" }}
{{- $args = append $args "--kubernetes.node-name=$(NODE_NAME)" }}
{{- else }}
{{- $args = append $args "--no-collector.kubernetes" }}
{{- end }}
{{- range $src := $sources }}
{{- $values := index $e $src.name | default dict }}
{{- range $s := $src.settings }}
{{- $v := index $values $s.value }}
{{- if $s.repeat }}
{{- range $item := $v }}
{{- $args = append $args (printf "%s=%v" $s.flag $item) }}
{{- end }}
{{- else if $v }}
{{- $args = append $args (printf "%s=%v" $s.flag $v) }}
{{- end }}
{{- end }}
{{- end }}
{{- with $e.sampler.interval }}
{{- $args = append $args (printf "--sampler.interval=%s" .) }}
{{- end }}
{{- $args = append $args (printf "--sampler.window=%s" (include "headroom.samplerWindow" .)) }}
{{- if .Values.flightRecorder.enabled }}
{{- $args = append $args (printf "--flight-recorder.dir=%s" .Values.flightRecorder.mountPath) }}
{{- end }}
{{- with .Values.flightRecorder.window }}
{{- $args = append $args (printf "--flight-recorder.window=%s" .) }}
{{- end }}
{{- with .Values.webConfig.secretName }}
{{- $args = append $args (printf "--web.config.file=/etc/headroom/web/%s" $.Values.webConfig.key) }}
{{- end }}
{{- $args = append $args (printf "--log.level=%s" $e.logLevel) }}
{{- $args = append $args (printf "--log.format=%s" $e.logFormat) }}
{{- $args = concat $args .Values.extraArgs }}
{{- toYaml $args }}
{{- end }}

{{/*
Container security context: the values', plus SYSLOG when kmsg is read, plus privileged
when kmsg.privileged (the API rejects privileged with allowPrivilegeEscalation false).
*/}}
{{- define "headroom.securityContext" -}}
{{- $sc := deepCopy .Values.securityContext }}
{{- if .Values.kmsg.enabled }}
{{- $caps := $sc.capabilities | default dict }}
{{- $add := concat ($caps.add | default list) (list "SYSLOG") | uniq }}
{{- $_ := set $caps "add" $add }}
{{- $_ := set $sc "capabilities" $caps }}
{{- if .Values.kmsg.privileged }}
{{- $_ := set $sc "privileged" true }}
{{- $_ := set $sc "allowPrivilegeEscalation" true }}
{{- end }}
{{- end }}
{{- toYaml $sc }}
{{- end }}

{{/*
recursiveReadOnly for the host mounts: IfPossible (falls back to plain readOnly where the
runtime or kernel cannot) on Kubernetes 1.30+, where the field exists; older API servers
would reject it. hostPaths.recursiveReadOnly: "" leaves it out.
*/}}
{{- define "headroom.recursiveReadOnly" -}}
{{- if and .Values.hostPaths.recursiveReadOnly (semverCompare ">=1.30.0-0" .Capabilities.KubeVersion.Version) -}}
recursiveReadOnly: {{ .Values.hostPaths.recursiveReadOnly }}
{{- end }}
{{- end }}

{{/*
A probe from values, fitted to the web config: HTTPS when it serves TLS, a TCP check when
it requires client certificates (the kubelet presents none). Input: dict probe, root.
*/}}
{{- define "headroom.probe" -}}
{{- $p := deepCopy .probe }}
{{- $w := .root.Values.webConfig }}
{{- if and $w.secretName $p.httpGet }}
{{- if $w.clientAuth }}
{{- $port := $p.httpGet.port }}
{{- $_ := unset $p "httpGet" }}
{{- $_ := set $p "tcpSocket" (dict "port" $port) }}
{{- else if $w.tls }}
{{- $_ := set $p.httpGet "scheme" "HTTPS" }}
{{- end }}
{{- end }}
{{- toYaml $p }}
{{- end }}

{{/*
The cgroup filesystem's volume mounts, shared by the exporter and the check that runs
before it (so the check sees exactly the exporter's mounts): the whole cgroupfs, or one
read-only mount per v1 controller (hostPaths.cgroupV1Controllers).
*/}}
{{- define "headroom.cgroupMounts" -}}
{{- range .Values.hostPaths.cgroupV1Controllers }}
# One read-only mount per v1 controller: no writable sub-mount beneath.
- name: cgroup-{{ . | replace "_" "-" }}
  mountPath: {{ include "headroom.cgroupfsMount" $ }}/{{ . }}
  readOnly: true
{{- else }}
- name: cgroup
  mountPath: {{ include "headroom.cgroupfsMount" . }}
  readOnly: true
  {{- include "headroom.recursiveReadOnly" . | nindent 2 }}
{{- end }}
{{- end }}

{{/*
The init container's check (python3 -c; argv[1]: the cgroupfs mount point): every mount
at or below it must be read-only, or the pod does not start. A chart cannot know a node's
cgroup version, and on v1 a readOnly mount of /sys/fs/cgroup leaves each controller (its
own mount) writable unless the kubelet and runtime made it recursively read-only; so
the pod itself looks at what it was given (the per-mount flags in mountinfo, field 6).
*/}}
{{- define "headroom.cgroupfsReadOnlyCheck" -}}
import sys
root = sys.argv[1].rstrip("/")
writable = []
for line in open("/proc/self/mountinfo"):
    fields = line.split(" - ")[0].split()
    point, options = fields[4], fields[5].split(",")
    if (point == root or point.startswith(root + "/")) and "ro" not in options:
        writable.append(point)
if writable:
    sys.exit("headroom: refusing to start: writable cgroup mounts in this pod (cgroup v1 "
             "without recursive read-only mounts): " + " ".join(writable[:8]) + ". Set "
             "hostPaths.cgroupV1Controllers={memory} for cgroup v1 nodes, or "
             "hostPaths.refuseWritableCgroupfs=false to run anyway.")
print("headroom: every cgroup mount under", root, "is read-only")
{{- end }}
