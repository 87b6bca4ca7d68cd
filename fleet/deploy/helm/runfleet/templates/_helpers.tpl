{{/* The release's name prefix: the release name, or release-chart when it does not hold the chart's name. */}}
{{- define "runfleet.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels of every object; the component's name is added by the caller. */}}
{{- define "runfleet.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The selector of one component: (list $ "worker"). */}}
{{- define "runfleet.selector" -}}
{{- $ := index . 0 -}}
app.kubernetes.io/name: {{ $.Chart.Name }}
app.kubernetes.io/instance: {{ $.Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{- define "runfleet.image" -}}
{{- $ := index . 0 -}}
{{- $i := index $.Values.images (index . 1) -}}
{{- printf "%s:%s" $i.repository $i.tag -}}
{{- end -}}

{{/* NATS's client URLs: every node of the StatefulSet, by its stable name. */}}
{{- define "runfleet.natsURL" -}}
{{- $name := printf "%s-nats" (include "runfleet.fullname" .) -}}
{{- $urls := list -}}
{{- range $i := until (int .Values.nats.replicas) -}}
{{- $urls = append $urls (printf "nats://%s-%d.%s:4222" $name $i $name) -}}
{{- end -}}
{{- join "," $urls -}}
{{- end -}}

{{/* The workers' --redis-url: the Sentinels, or the one Redis. */}}
{{- define "runfleet.redisURL" -}}
{{- $f := include "runfleet.fullname" . -}}
{{- if .Values.redis.sentinel.enabled -}}
{{- $s := printf "%s-sentinel" $f -}}
{{- printf "redis+sentinel://%s-0.%s:26379,%s-1.%s:26379,%s-2.%s:26379/%s" $s $s $s $s $s $s .Values.redis.sentinel.masterName -}}
{{- else -}}
{{- printf "redis://%s-redis:6379/0" $f -}}
{{- end -}}
{{- end -}}

{{/* The worker's drain (values.yaml, worker.maxTimeout): --grace, then the pod's grace. */}}
{{- define "runfleet.workerGrace" -}}
{{- add (int .Values.worker.maxTimeout) (int .Values.worker.settleBudget) -}}
{{- end -}}
{{- define "runfleet.workerTerminationGrace" -}}
{{- add (include "runfleet.workerGrace" . | int) (int .Values.worker.settleBudget) (int .Values.worker.shutdownMargin) -}}
{{- end -}}

{{/* The peer the scrapers are: networkPolicy.metricsFrom, or any pod of any namespace. */}}
{{- define "runfleet.metricsFrom" -}}
{{- with .Values.networkPolicy.metricsFrom -}}
{{- toJson . -}}
{{- else -}}
{"namespaceSelector": {}}
{{- end -}}
{{- end -}}
