import { useMemo, useState } from 'react';
import Box from '@material-ui/core/Box';
import Button from '@material-ui/core/Button';
import Checkbox from '@material-ui/core/Checkbox';
import FormControlLabel from '@material-ui/core/FormControlLabel';
import FormHelperText from '@material-ui/core/FormHelperText';
import Grid from '@material-ui/core/Grid';
import TextField from '@material-ui/core/TextField';
import Typography from '@material-ui/core/Typography';
import Alert from '@material-ui/lab/Alert';
import { useApi } from '@backstage/core-plugin-api';
import { isGpuplaneError } from '@gpuplane/client';
import { gpuplaneApiRef } from '../api/GpuplaneApi';
import {
  askFieldPaths,
  normalizeFieldPath,
  type AskField,
  type FitResult,
  type GpuplaneRequest,
  type Team,
  type VirtualClusterAsk,
} from '../api/types';
import { GpuplaneErrorPanel } from './GpuplaneErrorPanel';
import { FitPanel } from './FitPanel';
import { newRequestId, useDebounced, useLoad } from './hooks';
import { coresToMillis, gibToBytes } from './quantities';
import { describeRequest } from './requestText';

interface FormValues {
  virtualClusterId: string;
  displayName: string;
  gpu: string;
  cpu: string;
  memory: string;
  allowFractionalGpus: boolean;
  justification: string;
}

const empty: FormValues = {
  virtualClusterId: '',
  displayName: '',
  gpu: '1',
  cpu: '8',
  memory: '32',
  allowFractionalGpus: false,
  justification: '',
};

/** Field violations of an API error, by form field; unknown paths under "". */
export function violationsByField(error: unknown): Partial<Record<AskField | '', string[]>> {
  const out: Partial<Record<AskField | '', string[]>> = {};
  if (!isGpuplaneError(error)) return out;
  for (const v of error.fieldViolations) {
    const field = askFieldPaths[normalizeFieldPath(v.field)] ?? '';
    (out[field] ??= []).push(v.description);
  }
  return out;
}

const isMapped = (path: string) => askFieldPaths[normalizeFieldPath(path)] !== undefined;

function toAsk(team: string, v: FormValues): VirtualClusterAsk {
  return {
    team,
    virtualClusterId: v.virtualClusterId.trim(),
    displayName: v.displayName.trim(),
    gpu: v.gpu.trim(),
    cpuMillis: coresToMillis(Number(v.cpu) || 0),
    memoryBytes: gibToBytes(Number(v.memory) || 0),
    allowFractionalGpus: v.allowFractionalGpus,
    justification: v.justification.trim(),
  };
}

function FitStatus(props: {
  touched: boolean;
  checking: boolean;
  fit: { value?: FitResult; error?: unknown };
}) {
  const { touched, checking, fit } = props;
  if (!touched) {
    return (
      <Typography variant="body2" color="textSecondary">
        The fit check runs as you type.
      </Typography>
    );
  }
  if (checking) return <Typography variant="body2">Checking whether it fits…</Typography>;
  if (fit.error !== undefined) {
    return <GpuplaneErrorPanel error={fit.error} title="The fit check refused this ask" hideFields={isMapped} />;
  }
  return fit.value ? <FitPanel fit={fit.value} /> : null;
}

/**
 * Ask for a virtual cluster. While the user types, the ask is checked
 * against the quota hierarchy (POST /v1/requests:checkFit, debounced), and
 * the API's field violations appear under the fields they concern.
 */
export function RequestForm(props: {
  teamId: string;
  team?: Team;
  onCreated?: (request: GpuplaneRequest) => void;
  fitDebounceMs?: number;
}) {
  const { teamId, team, onCreated, fitDebounceMs = 400 } = props;
  const api = useApi(gpuplaneApiRef);
  const [values, setValues] = useState<FormValues>(empty);
  const [touched, setTouched] = useState<Set<keyof FormValues>>(new Set());
  const [requestId, setRequestId] = useState(newRequestId);
  const [submitting, setSubmitting] = useState(false);
  const [submitError, setSubmitError] = useState<unknown>();
  const [created, setCreated] = useState<GpuplaneRequest>();

  const ask = useMemo(() => toAsk(teamId, values), [teamId, values]);
  const debouncedAsk = useDebounced(ask, fitDebounceMs);
  const fitting = ask !== debouncedAsk;
  const fit = useLoad<FitResult | undefined>(
    () => (touched.size === 0 ? Promise.resolve(undefined) : api.checkFit(debouncedAsk)),
    [api, debouncedAsk, touched.size === 0],
  );

  // Violations from the last submit win; the live check's only for fields
  // the user has touched, so an untouched empty field does not shout.
  const submitViolations = violationsByField(submitError);
  const fitViolations = violationsByField(fit.error);
  const messages = (field: AskField, formField?: keyof FormValues) =>
    submitViolations[field] ??
    (formField === undefined || touched.has(formField) ? fitViolations[field] : undefined);

  const set = (field: keyof FormValues) => (e: React.ChangeEvent<HTMLInputElement>) => {
    const value = field === 'allowFractionalGpus' ? e.target.checked : e.target.value;
    setValues(v => ({ ...v, [field]: value }));
    setTouched(t => new Set(t).add(field));
    setCreated(undefined);
  };

  const submit = async (e: React.FormEvent) => {
    e.preventDefault();
    setSubmitting(true);
    setSubmitError(undefined);
    try {
      const request = await api.requestVirtualCluster(ask, requestId);
      setCreated(request);
      setValues(empty);
      setTouched(new Set());
      setRequestId(newRequestId());
      onCreated?.(request);
    } catch (err) {
      setSubmitError(err);
    } finally {
      setSubmitting(false);
    }
  };

  const field = (name: keyof FormValues & AskField, label: string, extra: object = {}) => {
    const errors = messages(name, name);
    return (
      <TextField
        id={`gpuplane-${name}`}
        name={name}
        label={label}
        value={values[name]}
        onChange={set(name)}
        error={Boolean(errors)}
        helperText={errors?.join('; ')}
        fullWidth
        margin="dense"
        variant="outlined"
        {...extra}
      />
    );
  };
  const quotaErrors = messages('quota');
  const dedicated = team?.isolationTier === 'DEDICATED';

  return (
    <Box component="form" onSubmit={submit} maxWidth={720} aria-label="request a virtual cluster">
      <Typography variant="h6">Request a virtual cluster for {teamId}</Typography>
      <Grid container spacing={2}>
        <Grid item xs={12} sm={6}>
          {field('virtualClusterId', 'Virtual cluster id', {
            required: true,
            placeholder: 'ml-dev',
            inputProps: { 'aria-describedby': 'gpuplane-virtualClusterId-helper-text' },
          })}
        </Grid>
        <Grid item xs={12} sm={6}>
          {field('displayName', 'Display name (optional)')}
        </Grid>
        <Grid item xs={4}>
          {field('gpu', 'GPUs', { helperText: messages('gpu', 'gpu')?.join('; ') ?? (dedicated ? 'whole GPUs (DEDICATED team)' : 'e.g. 1 or 0.5') })}
        </Grid>
        <Grid item xs={4}>
          {field('cpu', 'CPU cores', { type: 'number', inputProps: { min: 0, step: 0.5 } })}
        </Grid>
        <Grid item xs={4}>
          {field('memory', 'Memory (GiB)', { type: 'number', inputProps: { min: 0, step: 1 } })}
        </Grid>
        {quotaErrors && (
          <Grid item xs={12}>
            <FormHelperText error data-testid="quota-error">{quotaErrors.join('; ')}</FormHelperText>
          </Grid>
        )}
        <Grid item xs={12}>
          <FormControlLabel
            control={
              <Checkbox
                name="allowFractionalGpus"
                checked={values.allowFractionalGpus}
                onChange={set('allowFractionalGpus')}
                disabled={dedicated}
              />
            }
            label="Allow fractional GPUs (gpu-fraction pods; SHARED teams only)"
          />
          {messages('allowFractionalGpus', 'allowFractionalGpus') && (
            <FormHelperText error>{messages('allowFractionalGpus', 'allowFractionalGpus')?.join('; ')}</FormHelperText>
          )}
        </Grid>
        <Grid item xs={12}>
          {field('justification', 'Justification', { multiline: true, minRows: 2 })}
        </Grid>
      </Grid>

      <Box my={2} data-testid="fit-check" aria-live="polite">
        <FitStatus touched={touched.size > 0} checking={fitting || fit.loading} fit={fit} />
      </Box>

      {submitError !== undefined && (
        <Box mb={2}>
          <GpuplaneErrorPanel error={submitError} title="The request was not created" hideFields={isMapped} />
        </Box>
      )}
      {created && (
        <Box mb={2}>
          <Alert severity="success" data-testid="request-created">
            Request <code>{created.name}</code> ({describeRequest(created)}) is {created.state}
            {created.approvalPolicy ? ` (auto-approved by ${created.approvalPolicy})` : ''}.
          </Alert>
        </Box>
      )}
      <Button type="submit" color="primary" variant="contained" disabled={submitting}>
        {submitting ? 'Requesting…' : 'Request virtual cluster'}
      </Button>
    </Box>
  );
}
