import Box from '@material-ui/core/Box';
import Chip from '@material-ui/core/Chip';
import Typography from '@material-ui/core/Typography';
import Alert from '@material-ui/lab/Alert';
import AlertTitle from '@material-ui/lab/AlertTitle';
import { isGpuplaneError } from '@gpuplane/client';

/**
 * An API error as a user can act on it: the message, the gRPC code and the
 * ErrorInfo reason, the field violations not shown next to a form field,
 * and the request id the server logs are keyed by.
 */
export function GpuplaneErrorPanel(props: {
  error: unknown;
  title?: string;
  /** Violations already shown next to their fields. */
  hideFields?: (field: string) => boolean;
}) {
  const { error, title, hideFields } = props;
  if (!isGpuplaneError(error)) {
    const message = error instanceof Error ? error.message : String(error);
    return (
      <Alert severity="error" data-testid="gpuplane-error">
        {title && <AlertTitle>{title}</AlertTitle>}
        {message}
      </Alert>
    );
  }
  const violations = error.fieldViolations.filter(v => !hideFields?.(v.field));
  return (
    <Alert severity="error" data-testid="gpuplane-error">
      <AlertTitle>{title ?? error.message}</AlertTitle>
      {title && <Typography variant="body2">{error.message}</Typography>}
      <Box mt={1} display="flex" style={{ gap: 8 }} flexWrap="wrap">
        <Chip size="small" label={error.codeName} />
        {error.reason && <Chip size="small" color="secondary" label={error.reason} data-testid="gpuplane-error-reason" />}
      </Box>
      {violations.length > 0 && (
        <Box component="ul" mt={1} mb={0} pl={2}>
          {violations.map(v => (
            <li key={`${v.field}:${v.description}`}>
              <code>{v.field}</code>: {v.description}
            </li>
          ))}
        </Box>
      )}
      {error.requestId && (
        <Typography variant="caption" display="block">
          request id {error.requestId}
        </Typography>
      )}
    </Alert>
  );
}
