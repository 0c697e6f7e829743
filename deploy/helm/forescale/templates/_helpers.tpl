{{- define "forescale.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "forescale.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else if contains (include "forescale.name" .) .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name (include "forescale.name" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "forescale.selectorLabels" -}}
app.kubernetes.io/name: {{ include "forescale.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: scaler
{{- end -}}

{{- define "forescale.labels" -}}
{{ include "forescale.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: forescale
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "forescale.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "forescale.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "forescale.tlsSecretName" -}}
{{- default (printf "%s-grpc-tls" (include "forescale.fullname" .)) .Values.tls.secretName -}}
{{- end -}}

{{- define "forescale.kedaClientSecretName" -}}
{{- default (printf "%s-keda-client-tls" (include "forescale.fullname" .)) .Values.tls.keda.clientSecretName -}}
{{- end -}}

{{/* the DNS names KEDA dials: <fullname>, .<ns>, .<ns>.svc, .<ns>.svc.cluster.local */}}
{{- define "forescale.dnsNames" -}}
{{- $f := include "forescale.fullname" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $f (printf "%s.%s" $f $ns) (printf "%s.%s.svc" $f $ns) (printf "%s.%s.svc.cluster.local" $f $ns) | toJson -}}
{{- end -}}

{{/* tls.source cert-manager without an issuerRef: the chart's CA (its Certificate, Secret and CA ClusterIssuer) */}}
{{- define "forescale.caIssuerName" -}}
{{- printf "%s-ca" (include "forescale.fullname" .) -}}
{{- end -}}
