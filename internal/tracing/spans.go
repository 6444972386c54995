package tracing

// The spans of one deployment's trace, in the order they start, and their attributes. The names
// are short verbs of what the span times; the service (outpost-orchestrator, outpost-agent,
// outpost-job) says where. README.md shows the tree, the end-to-end test checks it.
const (
	// SpanEnqueue is the orchestrator's create of the deployment: the root of its trace.
	SpanEnqueue = "enqueue"
	// SpanClaim is the agent's claim of an attempt and its start with the executor.
	SpanClaim = "claim"
	// SpanCreateJob is the kubernetes executor's creation of the attempt's Job and token Secret.
	SpanCreateJob = "create Job"
	// SpanStartProcess is the process executor's start of the attempt's process.
	SpanStartProcess = "start process"
	// SpanJob is the job runner's whole run of an attempt, in the job pod (or process).
	SpanJob = "job"
	// SpanFetchSpec is the job runner's fetch of the job spec.
	SpanFetchSpec = "fetch spec"
	// SpanFetchSource is the job runner's layout of the source (inline archive or git).
	SpanFetchSource = "fetch source"
	// SpanInit is the CLI's init; the CLI's own spans nest under it.
	SpanInit = "init"
	// SpanOutputs is the job runner's read and upload of the outputs.
	SpanOutputs = "outputs"
	// SpanStateWrite is one write of the state through the job runner's state proxy.
	SpanStateWrite = "state write"
	// The CLI's plan, apply and destroy are spans named by the operation (api.Operation).
)

// Attribute keys on Outpost's spans.
const (
	AttrOrg        = "outpost.org"
	AttrRunner     = "outpost.runner_id"
	AttrDeployment = "outpost.deployment_id"
	AttrAttempt    = "outpost.attempt"
	AttrOperation  = "outpost.operation"
	AttrJob        = "outpost.k8s_job"
)
